//! `VTRR.CONVERT`: a queue moved whole from one layout to the other, in one
//! call, through the [`QueueLayout`](super::QueueLayout) each provides
//! (`take` out of one, `install` into the other).

use redis_module::Context;

use super::open::{may_write_every_key, Caller, OpenError, Propagate};
use super::{keys_layout_key_beside, layout_of, QueueStore};
use crate::config::Layout;
use crate::core::{CoreError, CoreOp};
use crate::engine::memory::MemoryStore;
use crate::server::log_warning;
use crate::text::Quoted;
use crate::watch;

/// Why a queue was not converted. Nothing changed.
pub enum ConvertError {
    Open(OpenError),
    /// A key of the keys layout exists beside the native queue: another
    /// client's, not to merge into.
    KeyTaken(Vec<u8>),
    /// The queue's keys could not be read as a queue.
    Core(CoreError),
}

/// Moves `queue` to layout `to`, atomically, leases and tokens included;
/// false when it has that layout already or does not exist. Every key's
/// ACL permission is checked before anything changes.
pub fn convert(ctx: &Context, queue: &[u8], to: Layout) -> Result<bool, ConvertError> {
    let from = layout_of(ctx, queue);
    if from == to {
        return Ok(false);
    }
    may_write_every_key(ctx, queue).map_err(ConvertError::Open)?;
    // The target is checked before anything is taken.
    if to == Layout::keys {
        if let Some(key) = keys_layout_key_beside(ctx, queue) {
            return Err(ConvertError::KeyTaken(key));
        }
    }
    let moved = open_for_convert(ctx, queue, from)?
        .take()
        .map_err(ConvertError::Core)?;
    if moved.is_empty() {
        return Ok(false);
    }
    let mut target = match put_queue(ctx, queue, to, moved) {
        Ok(target) => target,
        // Whatever refused the target, the queue goes back where it was:
        // nothing changed, so nothing is propagated.
        Err((refused, moved)) => {
            if let Err((_, lost)) = put_queue(ctx, queue, from, moved) {
                log_warning(
                    ctx,
                    &format!(
                        "vtrr: VTRR.CONVERT of queue {} failed and could not put back its {} entries",
                        Quoted(queue),
                        lost.entries()
                    ),
                );
            }
            return Err(refused);
        }
    };
    target.commit(c"vtrr.convert", || Propagate::Verbatim);
    drop(target);
    watch::recheck(ctx, queue);
    Ok(true)
}

/// Opens `queue` in `layout` for VTRR.CONVERT.
fn open_for_convert<'ctx>(
    ctx: &'ctx Context,
    queue: &[u8],
    layout: Layout,
) -> Result<QueueStore<'ctx>, ConvertError> {
    QueueStore::open_as(layout, ctx, queue, CoreOp::Convert.into(), Caller::Client)
        .map_err(ConvertError::Open)
}

/// Puts `moved` into `layout` (empty), returning the store to commit; on
/// failure, the refusal and the queue, with nothing left written.
// The queue travels by value (a move of its root, once per CONVERT).
#[allow(clippy::result_large_err)]
fn put_queue<'ctx>(
    ctx: &'ctx Context,
    queue: &[u8],
    layout: Layout,
    moved: MemoryStore,
) -> Result<QueueStore<'ctx>, (ConvertError, MemoryStore)> {
    let mut target = match open_for_convert(ctx, queue, layout) {
        Ok(target) => target,
        Err(refused) => return Err((refused, moved)),
    };
    target.install(moved);
    Ok(target)
}

/// Entries above which a queue taken out of its key is freed on a thread
/// of its own: about what freeing costs as much as starting the thread.
const FREED_IN_BACKGROUND: usize = 10_000;

/// Frees a big queue off the main thread, as the server's lazy free frees
/// an unlinked native queue (a million entries take a fifth of a second to
/// free); on this thread when it is small or no thread can start.
pub(super) fn free_in_background(queue: MemoryStore) {
    if queue.entries() <= FREED_IN_BACKGROUND {
        return;
    }
    // A thread that cannot start drops the closure, and the queue with it,
    // here.
    let _ = std::thread::Builder::new()
        .name("vtrr-free".into())
        .spawn(move || drop(queue));
}
