//! Panics a test did not plan: a hook (installed once for the binary)
//! keeps the message of each panic whose message does not say "on
//! purpose", by the name of the thread it happened on. Each `#[tokio::test]`
//! runs on a thread named for the test, and its runtime (current thread)
//! runs its spawned tasks there too.

use std::collections::HashMap;
use std::sync::{Mutex, Once};

static HOOK: Once = Once::new();
static PANICS: Mutex<Option<HashMap<String, Vec<String>>>> = Mutex::new(None);

/// Starts keeping the unplanned panics of this binary's threads.
pub(crate) fn watch() {
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info.to_string();
            if !message.contains("on purpose") {
                let thread = std::thread::current().name().unwrap_or("?").to_owned();
                let mut panics = PANICS.lock().unwrap_or_else(|e| e.into_inner());
                panics
                    .get_or_insert_with(HashMap::new)
                    .entry(thread)
                    .or_default()
                    .push(message);
            }
            default(info);
        }));
    });
}

/// Fails when this test's thread panicked (an unplanned panic, caught by
/// tokio in a spawned task) since [`watch`] was called.
pub(crate) fn assert_no_panic() {
    let thread = std::thread::current().name().unwrap_or("?").to_owned();
    let panics = PANICS.lock().unwrap_or_else(|e| e.into_inner());
    let mine = panics.as_ref().and_then(|p| p.get(&thread));
    assert!(mine.is_none(), "a task panicked: {mine:?}");
}

/// How many unplanned panics this thread had so far.
pub(crate) fn count() -> usize {
    let thread = std::thread::current().name().unwrap_or("?").to_owned();
    let panics = PANICS.lock().unwrap_or_else(|e| e.into_inner());
    panics
        .as_ref()
        .and_then(|p| p.get(&thread))
        .map_or(0, Vec::len)
}
