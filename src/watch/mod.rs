//! What the timer watches, kept below both of its writers: the operations
//! layer notes due times here ([`index`]) and brings the next tick forward
//! ([`alarm`]); the timer, a caller of the operations layer, reads the
//! index and arms the alarm. Neither imports the other.

pub mod alarm;
pub mod index;
