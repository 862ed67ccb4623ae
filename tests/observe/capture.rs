//! A capturing `tracing` layer: every span's fields (as recorded, updated
//! on `record`), kept after the span closes, looked up by span name and
//! request id.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

pub(crate) type Fields = BTreeMap<String, String>;

#[derive(Clone, Default)]
pub(crate) struct Capture {
    /// (span name, fields), in creation order; a span's entry is updated in place.
    spans: Arc<Mutex<Vec<(String, Fields)>>>,
    /// Span id → index in `spans`, while the span is open.
    open: Arc<Mutex<BTreeMap<u64, usize>>>,
    /// The fields of each `request ended` event, with its span's name.
    ended: Arc<Mutex<Vec<(String, Fields)>>>,
}

struct Visitor<'a>(&'a mut Fields);

impl Visit for Visitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        attrs.record(&mut Visitor(&mut fields));
        let mut spans = self.spans.lock().unwrap();
        spans.push((attrs.metadata().name().to_owned(), fields));
        self.open
            .lock()
            .unwrap()
            .insert(id.into_u64(), spans.len() - 1);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let Some(&i) = self.open.lock().unwrap().get(&id.into_u64()) else {
            return;
        };
        values.record(&mut Visitor(&mut self.spans.lock().unwrap()[i].1));
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        if event.metadata().target() != "tower_mcp_cancel::request" {
            return;
        }
        let mut fields = Fields::new();
        event.record(&mut Visitor(&mut fields));
        let span = ctx
            .event_span(event)
            .map(|s| s.name().to_owned())
            .unwrap_or_default();
        self.ended.lock().unwrap().push((span, fields));
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        self.open.lock().unwrap().remove(&id.into_u64());
    }
}

impl Capture {
    /// Installs a capture as this thread's default subscriber (a
    /// current-thread runtime runs every task on it).
    pub(crate) fn install() -> (Self, tracing::subscriber::DefaultGuard) {
        let cap = Capture::default();
        let subscriber = tracing_subscriber::registry().with(cap.clone());
        let guard = tracing::subscriber::set_default(subscriber);
        (cap, guard)
    }

    /// The fields of the span `name` whose `jsonrpc.request.id` is `id`.
    pub(crate) fn span(&self, name: &str, id: &str) -> Option<Fields> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|(n, f)| n == name && f.get("jsonrpc.request.id").map(String::as_str) == Some(id))
            .map(|(_, f)| f.clone())
    }

    /// Waits (yielding to the runtime, no timer) until the span `name` of
    /// request `id` has recorded its outcome, and returns its fields.
    pub(crate) async fn ended(&self, name: &str, id: &str) -> Fields {
        for _ in 0..100_000 {
            if let Some(f) = self.span(name, id) {
                if f.contains_key("mcp.request.outcome") {
                    return f;
                }
            }
            tokio::task::yield_now().await;
        }
        panic!(
            "span {name} of request {id} never ended; spans: {:?}",
            self.spans.lock().unwrap()
        );
    }

    /// Waits (yielding, no timer) until the span `name` of request `id` exists.
    pub(crate) async fn started(&self, name: &str, id: &str) {
        for _ in 0..100_000 {
            if self.span(name, id).is_some() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("span {name} of request {id} never started");
    }

    /// How many `request ended` lines were logged inside spans named `name`.
    pub(crate) fn end_lines(&self, name: &str) -> Vec<Fields> {
        self.ended
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, f)| f.clone())
            .collect()
    }
}

/// Asserts a field's value.
#[track_caller]
pub(crate) fn assert_field(fields: &Fields, key: &str, value: &str) {
    assert_eq!(
        fields.get(key).map(String::as_str),
        Some(value),
        "field {key} in {fields:?}"
    );
}
