//! The answers of requests that ended at their first poll on the reader,
//! queued to the writer together.

use std::sync::{Mutex, MutexGuard};

use super::{BATCH_MAX_ANSWERS, BATCH_MAX_BYTES};
use crate::cancel::InFlightGuard;

/// The answers of requests that ended in the reader, queued as one message
/// when the reader has no complete line left to read (or the batch is
/// full): one wake of the writer and one write for many answers.
///
/// Each answer's request scope is closed when its answer joins the batch,
/// so nothing of the request can be queued after it; its registry entry is
/// held until the batch is queued, so that its id cannot be reused before.
#[derive(Default)]
pub(crate) struct Batch(Mutex<Answers>);

#[derive(Default)]
struct Answers {
    /// The answers, each followed by a newline.
    bytes: Vec<u8>,
    guards: Vec<InFlightGuard>,
}

impl Batch {
    fn lock(&self) -> MutexGuard<'_, Answers> {
        // Only the reader locks it, never across an await.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a request's answer (none for a request the transport
    /// cancelled) and holds its registry entry. Returns whether the batch
    /// is full: it must be queued now.
    pub(crate) fn add(&self, answer: Option<Vec<u8>>, guard: InFlightGuard) -> bool {
        let mut batch = self.lock();
        if let Some(bytes) = answer {
            batch.bytes.extend_from_slice(&bytes);
            batch.bytes.push(b'\n');
        }
        batch.guards.push(guard);
        batch.guards.len() >= BATCH_MAX_ANSWERS || batch.bytes.len() >= BATCH_MAX_BYTES
    }

    /// Takes the batch, if anything is in it: the answers as lines (maybe
    /// none), and the registry entries to release once they are queued.
    pub(crate) fn take(&self) -> Option<(Vec<u8>, Vec<InFlightGuard>)> {
        let mut batch = self.lock();
        if batch.guards.is_empty() && batch.bytes.is_empty() {
            return None;
        }
        Some((
            std::mem::take(&mut batch.bytes),
            std::mem::take(&mut batch.guards),
        ))
    }
}
