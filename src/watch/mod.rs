//! What the timer watches, kept below both of its writers: the operations
//! layer notes due times here ([`index`]) and brings the next tick forward
//! ([`alarm`]); the timer, a caller of the operations layer, reads the
//! index and arms the alarm. Neither imports the other.

pub mod alarm;
pub mod index;

use redis_module::Context;

use crate::server::selected_db;
use alarm::wake_by;
use index::with_index;

/// Something of `queue` (in the context's database) falls due at `due_ms`.
pub fn due_at(ctx: &Context, queue: &[u8], due_ms: i64) {
    let db = selected_db(ctx);
    with_index(|index| index.note_due(db, queue, due_ms));
}

/// A schedule of `queue` next runs at `run_ms`: the timer wakes for it.
pub fn run_at(ctx: &Context, queue: &[u8], run_ms: i64) {
    let db = selected_db(ctx);
    with_index(|index| index.set_run(db, queue, Some(run_ms)));
    wake_by(ctx, run_ms);
}

/// The timer rereads when `queue` (in the context's database) next falls
/// due: a write it was not told of in detail (a control change, a queue
/// loaded or converted, another client's write to a due key).
pub fn recheck(ctx: &Context, queue: &[u8]) {
    let db = selected_db(ctx);
    with_index(|index| index.recheck.insert((db, queue.to_vec())));
}
