//! What opening a queue means, whatever its layout: who is acting, the
//! cluster and ACL checks every open makes, why an open can fail, how the
//! call it serves will propagate, and the probe that tells the layout.

use std::rc::Rc;

use redis_module::{raw, Context};

use crate::replication::effects::ApplyArgs;
use crate::server::acl::{Access, AclUser};
use crate::server::api::api;
use crate::server::cluster::{self, Actor};
use crate::server::key_names::{names_of, queue_key_name, QueueKeyNames};
use crate::server::strings::OwnedString;
use crate::store::{KeyKind, QueueKey, Scope};

/// Who is acting: a client (whose ACL user is checked) or the server itself
/// (the timer, which has no client and no user).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Client,
    Server,
}

/// How a committed call reaches replicas and the AOF (in `vtrr.replication
/// effects` mode, always as its effects). The operations layer holds, until
/// the call's outcome is known, a `Propagate` whose `A` makes the arguments
/// of its `VTRR.APPLY` from that outcome.
pub enum Propagate<A = ApplyArgs> {
    /// Its writes, as the plain commands that redo them (ZADD, HSET, ...):
    /// the rarer writes, which walk what they change.
    Effects,
    /// The client's command as it was sent: the call is deterministic (the
    /// same call on the same keys writes the same).
    Verbatim,
    /// `VTRR.APPLY` with these arguments (`replay::Apply::write_args`): a
    /// time-dependent call, with the moment it ran and what it drew.
    Apply(A),
}

/// Why a queue's keys could not be opened. Nothing was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenError {
    /// A key of the queue holds another type.
    WrongType { key: Vec<u8>, expected: KeyKind },
    /// The client's ACL user may not access this key.
    NoPermission { key: Vec<u8> },
    /// The queue's slot is being migrated to or from this node.
    SlotMoving,
}

/// A queue about to be opened for one call: what each layout's
/// [`open`](super::QueueLayout::open) starts from, and the checks every open
/// makes before it opens a key ([`Opening::check`]).
pub struct Opening<'ctx, 'q> {
    pub ctx: &'ctx Context,
    pub queue: &'q [u8],
    /// The keys the operation declares, and whether it writes.
    pub scope: Scope,
    pub caller: Caller,
    pub access: Access,
    /// Whether writes are recorded to propagate as effects (only the keys
    /// layout has effects: a native queue always propagates commands).
    pub records_effects: bool,
    /// `vtrr:<name>:queue` as the layout probe opened it, when in this
    /// call's mode.
    probe: Option<QueueKeyOpen>,
}

impl<'ctx, 'q> Opening<'ctx, 'q> {
    pub(crate) fn new(
        ctx: &'ctx Context,
        queue: &'q [u8],
        scope: Scope,
        caller: Caller,
        records_effects: bool,
        probe: Option<QueueKeyOpen>,
    ) -> Self {
        Opening {
            ctx,
            queue,
            scope,
            caller,
            access: Access::of(scope.writes),
            records_effects,
            probe: probe.filter(|p| p.writable == scope.writes),
        }
    }

    /// The checks of every open, in every layout, before any key is
    /// opened: the cluster's (the queue's slot is not moving) and the
    /// calling client's ACL user's on each key of `keys` (the commands name
    /// a queue, not keys, so the server cannot check them itself). The
    /// queue's key names.
    ///
    /// A key of the scope's `if_present` that does not exist is not
    /// checked, and is named in the bits returned ([`Scope::missing`]): the
    /// call only reads or removes from it, so it touches nothing there.
    pub fn check(&self, keys: &[QueueKey]) -> Result<(Rc<QueueKeyNames>, u64), OpenError> {
        check_caller(self.ctx, self.queue, self.caller, self.access)?;
        let names = names_of(self.queue);
        let missing = self.scope.missing(|key| self.exists(names.name(key)));
        let checked = keys
            .iter()
            .filter(|key| missing & key.bit() == 0)
            .map(|&key| names.name(key));
        check_permissions(self.ctx, checked, self.caller, self.access)?;
        Ok((names, missing))
    }

    /// Whether the key `name` exists (a lookup: nothing is allocated).
    fn exists(&self, name: &OwnedString) -> bool {
        // SAFETY: live context and a valid name.
        unsafe { api!(RedisModule_KeyExists)(self.ctx.ctx, name.0) != 0 }
    }

    /// The ACL check of [`Self::check`] on more keys of the same call, once
    /// the layout knows it needs them (the cluster's is made).
    pub fn check_more(&self, names: &QueueKeyNames, keys: &[QueueKey]) -> Result<(), OpenError> {
        let named = keys.iter().map(|&key| names.name(key));
        check_permissions(self.ctx, named, self.caller, self.access)
    }

    /// [`Self::check`] for a layout that opens `vtrr:<name>:queue` alone:
    /// its name (no array of names is made: a native call's open is a
    /// few hundred instructions).
    pub fn check_queue_key(&self) -> Result<OwnedString, OpenError> {
        check_caller(self.ctx, self.queue, self.caller, self.access)?;
        let name = queue_key_name(self.queue);
        check_permissions(self.ctx, [&name], self.caller, self.access)?;
        Ok(name)
    }

    /// `vtrr:<name>:queue` open in the call's mode (named `name`): the
    /// probe's key when it was opened so, else opened now; NULL when it is
    /// missing and opened for reading (which reads as empty). The caller
    /// closes it.
    pub fn open_queue_key(&mut self, name: &OwnedString) -> *mut raw::RedisModuleKey {
        match self.probe.take() {
            Some(probe) => probe.take().1,
            None => {
                // SAFETY: live context and a valid name, which the caller
                // keeps while the key is open.
                unsafe { api!(RedisModule_OpenKey)(self.ctx.ctx, name.0, self.access.open_mode()) }
                    .cast::<raw::RedisModuleKey>()
            }
        }
    }
}

/// The cluster check of every open: a client or the timer acts only where
/// the queue's slot is not moving (the timer's reads only refresh its
/// index, so they may).
fn check_caller(
    ctx: &Context,
    queue: &[u8],
    caller: Caller,
    access: Access,
) -> Result<(), OpenError> {
    let actor = match (caller, access) {
        (Caller::Client, _) => Some(Actor::Client),
        (Caller::Server, Access::Write) => Some(Actor::Timer),
        (Caller::Server, Access::Read) => None,
    };
    if actor.is_some_and(|actor| !cluster::may_act_on(ctx, queue, actor)) {
        return Err(OpenError::SlotMoving);
    }
    Ok(())
}

/// The calling client's ACL user may access every key of `names` as
/// `access` says (the first denied one is logged and named).
fn check_permissions<'n>(
    ctx: &Context,
    names: impl IntoIterator<Item = &'n OwnedString>,
    caller: Caller,
    access: Access,
) -> Result<(), OpenError> {
    let user = match caller {
        Caller::Client => AclUser::of_caller(ctx),
        Caller::Server => None,
    };
    if let Some(user) = user {
        if let Some(denied) = names.into_iter().find(|name| !user.may(name, access)) {
            user.log_denied(ctx, denied);
            return Err(OpenError::NoPermission {
                key: denied.bytes().to_vec(),
            });
        }
    }
    Ok(())
}

/// The calling client may write every key the keys layout gives `queue`
/// (VTRR.CONVERT checks it before it changes anything).
pub fn may_write_every_key(ctx: &Context, queue: &[u8]) -> Result<(), OpenError> {
    let names = names_of(queue);
    let every = QueueKey::ALL.iter().map(|&key| names.name(key));
    check_permissions(ctx, every, Caller::Client, Access::Write)
}

/// `vtrr:<name>:queue`, open: the key that tells a queue's layout, handed
/// to the store that serves the call (closed on drop if none takes it).
pub struct QueueKeyOpen {
    pub(crate) name: OwnedString,
    pub(crate) key: *mut raw::RedisModuleKey,
    pub(crate) writable: bool,
}

impl QueueKeyOpen {
    pub(crate) fn open(ctx: &Context, queue: &[u8], writable: bool) -> QueueKeyOpen {
        let name = queue_key_name(queue);
        let mode = Access::of(writable).open_mode();
        // SAFETY: live context and a valid name kept with the key; a missing
        // key opened for reading is NULL, which reads as empty.
        let key = unsafe { api!(RedisModule_OpenKey)(ctx.ctx, name.0, mode) }
            .cast::<raw::RedisModuleKey>();
        QueueKeyOpen {
            name,
            key,
            writable,
        }
    }

    /// The key and its name, for a store that closes it itself.
    pub(crate) fn take(self) -> (OwnedString, *mut raw::RedisModuleKey) {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so the name is moved out once.
        let name = unsafe { std::ptr::read(&this.name) };
        (name, this.key)
    }
}

impl Drop for QueueKeyOpen {
    fn drop(&mut self) {
        if !self.key.is_null() {
            // SAFETY: opened once by `open`, closed once.
            unsafe { api!(RedisModule_CloseKey)(self.key) };
        }
    }
}
