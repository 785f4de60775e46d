//! The futures of one-sided operations: [`Landing`] for puts, atomics, signals and `quiet`,
//! [`GetLanding`] for gets into a caller's buffer.
//!
//! # Why not `async fn`
//! On a mapped route an operation is done before its call returns, and its future only
//! reports the outcome. An `async fn` would run the operation at its first poll inside a
//! state machine that also holds the remote arm; that machine is too large for the compiler
//! to inline into the caller, and a put to a mapped peer then pays a call and a copy of its
//! output through memory. These futures are built by `#[inline]` calls and polled by
//! `#[inline]` code, so a mapped operation compiles to its loads and stores alone; and they
//! are as small as a mapped outcome (a failure or a remote operation is boxed), because the
//! awaiting task keeps them in its own state, where a wide one costs a slow reload.
//!
//! # Cancel safety
//! The operation has started (or finished) when the call returns; dropping its future does
//! not recall it. A dropped remote get leaves its buffer as it was.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::route::Completion;

/// The future of a one-sided operation: ready at once when the operation ran on a mapped
/// route, else when the remote transport completes it (its bytes decoded into `T`).
///
/// It is as small as its outcome: a mapped put's is one null word, which the awaiting task
/// stores and reloads at no cost. A failure or a remote operation lives behind a box.
#[must_use = "a remote operation completes only when its future is awaited (or at quiet)"]
pub struct Landing<T: Pod> {
    state: std::result::Result<T, Box<Pending<T>>>,
}

/// What a [`Landing`] is waiting for, or the error it will report.
enum Pending<T> {
    /// The operation failed before it started (taken when polled).
    Failed(Option<Error>),
    /// The remote completion and how to read what it brings back.
    Remote(Completion, fn(Vec<u8>) -> Result<T>),
}

impl<T: Pod> Landing<T> {
    /// An operation that ran at once, with its outcome.
    #[inline]
    pub(crate) fn ready(outcome: Result<T>) -> Self {
        Landing {
            state: outcome.map_err(|e| Box::new(Pending::Failed(Some(e)))),
        }
    }

    /// An operation running on the remote transport; `decode` reads its completion's bytes.
    #[inline]
    pub(crate) fn remote(completion: Completion, decode: fn(Vec<u8>) -> Result<T>) -> Self {
        Landing {
            state: Err(Box::new(Pending::Remote(completion, decode))),
        }
    }
}

impl<T: Pod> Landing<T> {
    /// Whether the operation failed before it started (validation refused it).
    pub(crate) fn failed_at_once(&self) -> bool {
        matches!(&self.state, Err(pending) if matches!(**pending, Pending::Failed(_)))
    }

    /// The operation's value when it ran at once and succeeded (a mapped route): `None` when
    /// it failed or travels still (await the future then). Reads no error, so a caller that
    /// cannot await (a C routine) pays nothing more on its fast path.
    #[inline(always)]
    pub fn succeeded_at_once(&self) -> Option<T> {
        self.state.as_ref().ok().copied()
    }
}

impl<T: Pod + Unpin> Future for Landing<T> {
    type Output = Result<T>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        match &mut self.get_mut().state {
            Ok(value) => Poll::Ready(Ok(*value)),
            Err(pending) => pending.poll(cx),
        }
    }
}

impl<T: Pod> Drop for Landing<T> {
    /// Inline, so that a mapped outcome's drop is one test; the boxed state is dropped out of
    /// line.
    #[inline]
    fn drop(&mut self) {
        if self.state.is_err() {
            drop_out_of_line(std::mem::replace(&mut self.state, Ok(T::zeroed())));
        }
    }
}

impl<T> Pending<T> {
    /// Polls a failure or a remote completion; kept out of line, away from the mapped path.
    #[inline(never)]
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<T>> {
        match self {
            Pending::Failed(error) => Poll::Ready(Err(error.take().unwrap_or(Error::Polled))),
            Pending::Remote(completion, decode) => {
                let done = completion.as_mut().poll(cx).map(|r| r.and_then(*decode));
                if done.is_ready() {
                    // Polled again, it reports that rather than polling an ended completion.
                    *self = Pending::Failed(None);
                }
                done
            }
        }
    }
}

impl<T: Pod> std::fmt::Debug for Landing<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match &self.state {
            Ok(_) => "Landing::Ready",
            Err(pending) => match **pending {
                Pending::Failed(_) => "Landing::Failed",
                Pending::Remote(..) => "Landing::Remote",
            },
        })
    }
}

/// What a remote put, plain atomic or signal brings back: nothing.
pub(crate) fn nothing(_: Vec<u8>) -> Result<()> {
    Ok(())
}

/// The future of a get into a caller's buffer: ready at once when the get ran on a mapped
/// route, else when the remote bytes have landed in the buffer. One word when ready.
#[must_use = "a remote get fills its buffer only when its future is awaited"]
pub struct GetLanding<'a> {
    state: std::result::Result<(), Box<GetPending<'a>>>,
}

enum GetPending<'a> {
    Failed(Option<Error>),
    Remote(Completion, &'a mut [u8]),
}

impl<'a> GetLanding<'a> {
    /// A get that ran at once, with its outcome.
    #[inline]
    pub(crate) fn ready(outcome: Result<()>) -> Self {
        GetLanding {
            state: outcome.map_err(|e| Box::new(GetPending::Failed(Some(e)))),
        }
    }

    /// A get running on the remote transport, whose bytes go to `dest`.
    #[inline]
    pub(crate) fn remote(completion: Completion, dest: &'a mut [u8]) -> Self {
        GetLanding {
            state: Err(Box::new(GetPending::Remote(completion, dest))),
        }
    }
}

impl GetLanding<'_> {
    /// Whether the get ran at once and succeeded (a mapped route): the bytes are in the
    /// buffer. `false` when it failed or travels still (await the future then).
    #[inline(always)]
    pub fn succeeded_at_once(&self) -> bool {
        self.state.is_ok()
    }
}

impl Future for GetLanding<'_> {
    type Output = Result<()>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        match &mut self.get_mut().state {
            Ok(()) => Poll::Ready(Ok(())),
            Err(pending) => pending.poll(cx),
        }
    }
}

impl Drop for GetLanding<'_> {
    /// Inline, so that a mapped get's drop is one test; the boxed state is dropped out of
    /// line.
    #[inline]
    fn drop(&mut self) {
        if self.state.is_err() {
            drop_out_of_line(std::mem::replace(&mut self.state, Ok(())));
        }
    }
}

impl GetPending<'_> {
    /// Polls a failure or a remote read; kept out of line, away from the mapped path.
    #[inline(never)]
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        match self {
            GetPending::Failed(error) => Poll::Ready(Err(error.take().unwrap_or(Error::Polled))),
            GetPending::Remote(completion, dest) => {
                let done = completion.as_mut().poll(cx).map(|got| land(dest, got?));
                if done.is_ready() {
                    *self = GetPending::Failed(None);
                }
                done
            }
        }
    }
}

impl std::fmt::Debug for GetLanding<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match &self.state {
            Ok(()) => "GetLanding::Ready",
            Err(pending) => match **pending {
                GetPending::Failed(_) => "GetLanding::Failed",
                GetPending::Remote(..) => "GetLanding::Remote",
            },
        })
    }
}

/// Drops a future's boxed state, away from the caller's code.
#[inline(never)]
fn drop_out_of_line<T>(state: T) {
    drop(state);
}

/// Copies the bytes a remote read brought back into its destination, which must be exactly
/// as long.
pub(crate) fn land(dest: &mut [u8], got: Vec<u8>) -> Result<()> {
    if got.len() != dest.len() {
        return Err(Error::os(
            "remote read",
            format!("{} bytes came back for {}", got.len(), dest.len()),
        ));
    }
    dest.copy_from_slice(&got);
    Ok(())
}
