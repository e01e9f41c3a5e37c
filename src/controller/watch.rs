//! The watch stages every cache of the operator goes through: errors counted and logged, a
//! watch that expired relisted at once, a short bounded backoff otherwise, a fresh start
//! whenever the link to the API server is lost or regained (a partition leaves watches on
//! dead connections), and the health of each watch (first list done; failing now) for
//! readiness, reconciles and metrics. [`Cache`] is that pipeline, watch → reflector →
//! health, written once for every cache; what each cache adds goes between its stages.
//!
//! Errors never reach a kube-runtime `Controller`: its trigger backoff (up to 30 s) would
//! pause every trigger stream of the controller — and with them the caches they fill — long
//! after the API server is back.

use std::future::ready;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures::future::Either;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{Store, store::Writer};
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, ExponentialBackoff};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::decoded::{Decoded, FromIdentity, Undecodable};
use crate::link::{Link, LinkState};
use crate::metrics::{Metrics, Watched};

/// First retry after a watch error, and the longest pause between retries before jitter
/// (jitter adds up to as much again): an API server that comes back is seen within seconds.
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// A failing watch retries at least this often (the longest backoff with jitter, plus a
/// margin). A watch that saw an error and none since for this long has resumed: a watch that
/// resumes from its resourceVersion yields no event of its own to say so.
const RETRY_BOUND: Duration = Duration::from_secs(4);

/// Objects per page of a list. A list is read whole before its first object enters the
/// cache: pages keep that peak to one page, however many Browsers and pods there are.
const PAGE: u32 = 250;

/// `config` listing from the API server's storage page by page where the list is not streamed
/// ([`watcher_of`]). (A list that may be served from the API server's watch cache,
/// `resourceVersion=0`, comes unpaginated.)
pub fn list_in_pages(config: watcher::Config) -> watcher::Config {
    config.page_size(PAGE)
}

/// The API of `resource` over one namespace, or all namespaces for `None`: what a watched
/// scope (all namespaces, or one `--namespace`) means for a watch.
pub fn scoped_api<K>(
    client: &kube::Client,
    ns: Option<&str>,
    resource: &K::DynamicType,
) -> kube::Api<K>
where
    K: Resource<Scope = kube::core::DynamicResourceScope>,
{
    match ns {
        Some(ns) => kube::Api::namespaced_with(client.clone(), ns, resource),
        None => kube::Api::all_with(client.clone(), resource),
    }
}

/// The backoff of every watch of the operator.
pub fn backoff() -> impl Backoff {
    ExponentialBackoff::from(
        backon::ExponentialBuilder::default()
            .with_min_delay(BACKOFF_MIN)
            .with_max_delay(BACKOFF_MAX)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times(),
    )
}

#[derive(Debug, Default)]
struct State {
    /// Lists completed (the first one makes the cache usable).
    lists: u64,
    /// The first error of the current outage.
    failing_since: Option<Instant>,
    last_error: Option<Instant>,
}

/// The health of one watch.
pub struct WatchHealth {
    resource: Watched,
    metrics: Arc<Metrics>,
    state: Mutex<State>,
    synced: watch::Sender<bool>,
}

impl WatchHealth {
    pub fn new(resource: Watched, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            resource,
            metrics,
            state: Mutex::new(State::default()),
            synced: watch::Sender::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Completes once the first list is in the cache; `false` if the watch is gone.
    /// (kube-runtime's `Store::wait_until_ready` wakes only its last waiter, so concurrent
    /// reconciles wait on this signal instead.)
    pub async fn synced(&self) -> bool {
        self.synced.subscribe().wait_for(|s| *s).await.is_ok()
    }

    /// Whether the cache is complete and the watch is not failing now.
    pub fn is_up(&self) -> bool {
        self.is_up_at(Instant::now())
    }

    fn is_up_at(&self, now: Instant) -> bool {
        let state = self.lock();
        let failing = state.failing_since.is_some()
            && state
                .last_error
                .is_some_and(|at| now.saturating_duration_since(at) < RETRY_BOUND);
        state.lists > 0 && !failing
    }

    /// Records an error; returns whether it began an outage.
    fn error(&self, now: Instant) -> bool {
        let mut state = self.lock();
        // Quiet for longer than any backoff since the last error: that outage ended unseen.
        let resumed = state
            .last_error
            .is_none_or(|at| now.saturating_duration_since(at) >= RETRY_BOUND);
        state.last_error = Some(now);
        if state.failing_since.is_none() || resumed {
            state.failing_since = Some(now);
            return true;
        }
        false
    }

    /// Records that the watch delivers again (a list completed, or an event arrived);
    /// returns how long it had been failing.
    fn recovered(&self, now: Instant, listed: bool) -> Option<Duration> {
        let mut state = self.lock();
        if listed {
            state.lists += 1;
        }
        state.last_error = None;
        state
            .failing_since
            .take()
            .map(|since| now.saturating_duration_since(since))
    }

    fn observe_error(&self, error: &watcher::Error) {
        self.metrics.watch_error(self.resource);
        if self.error(Instant::now()) {
            warn!(resource = self.resource.as_str(), %error, "watch failed; retrying");
        }
    }

    fn observe_event<K>(&self, event: &watcher::Event<K>) {
        let listed = match event {
            watcher::Event::Init => {
                if self.lock().lists > 0 {
                    self.metrics.watch_restart(self.resource);
                }
                return;
            }
            watcher::Event::InitApply(_) => return,
            watcher::Event::InitDone => true,
            watcher::Event::Apply(_) | watcher::Event::Delete(_) => false,
        };
        if let Some(down) = self.recovered(Instant::now(), listed) {
            self.metrics.watch_resync(self.resource, down);
            info!(resource = self.resource.as_str(), after = ?down, relisted = listed, "watch resumed");
        }
        if listed {
            self.synced.send_replace(true);
        }
    }
}

/// Passes the first `410 Expired` of a run straight on, so that the watcher relists at once;
/// a second one in a row goes through the backoff like any error.
fn relist_expired_at_once<K>() -> impl FnMut(&Result<watcher::Event<K>, watcher::Error>) -> bool {
    let mut skipped = false;
    move |item| match item {
        Err(watcher::Error::WatchError(status)) if status.code == 410 && !skipped => {
            skipped = true;
            false
        }
        Err(_) => true,
        Ok(_) => {
            skipped = false;
            true
        }
    }
}

/// A watcher with the operator's error handling and backoff; errors still flow downstream
/// (the reflector ignores them) until [`triggers`] drops them. It starts anew, listing again,
/// whenever `link` moves to a new epoch; a lost link counts as an error of the watch. Call
/// [`observe`] after the reflector, so that a list counts as done once it is in the cache.
pub fn watch<K>(
    api: kube::Api<K>,
    config: watcher::Config,
    health: Arc<WatchHealth>,
    link: watch::Receiver<LinkState>,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let errors = health.clone();
    let streaming = Arc::new(AtomicBool::new(true));
    let start = move || {
        let mut relist = relist_expired_at_once();
        let health = errors.clone();
        watcher_of(api.clone(), config.clone(), streaming.clone())
            .inspect(move |item| {
                if let Err(error) = item {
                    health.observe_error(error);
                }
            })
            .filter(move |item| ready(relist(item)))
            .boxed()
            .backoff(backoff())
            .boxed()
    };
    restarting(start, link, move |error| health.observe_error(error))
}

/// The watcher of `api`. Its lists are streamed (`sendInitialEvents`: the objects come one
/// by one on the watch, where a list would be read a page at a time, and are served from the
/// API server's watch cache) while `streaming` holds; the first answer that says the server
/// cannot stream them ([`cannot_stream`]) clears it, and the watch lists in pages from then
/// on, starting at once.
fn watcher_of<K>(
    api: kube::Api<K>,
    config: watcher::Config,
    streaming: Arc<AtomicBool>,
) -> BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    if !streaming.load(Ordering::Relaxed) {
        return watcher::watcher(api, config).boxed();
    }
    let mut current = watcher::watcher(api.clone(), config.clone().streaming_lists()).boxed();
    let mut initial = true;
    futures::stream::poll_fn(move |cx| {
        loop {
            let item = futures::ready!(current.poll_next_unpin(cx));
            match &item {
                Some(Ok(watcher::Event::Init)) => initial = true,
                Some(Ok(watcher::Event::InitDone)) => initial = false,
                _ => {}
            }
            if let Some(Err(error)) = &item
                && let Some(answer) = cannot_stream(error, initial)
                && streaming.swap(false, Ordering::Relaxed)
            {
                // The code and reason say which case it is (422 Invalid: not offered; 500:
                // storage cannot serve it); the message, at debug level, the details.
                info!(
                    resource = api.resource_url(),
                    answer = %format_args!("{} {}", answer.code, answer.reason),
                    "the API server cannot stream lists; listing in pages"
                );
                debug!(resource = api.resource_url(), message = %answer.message, "streamed list refused");
                current = watcher::watcher(api.clone(), config.clone()).boxed();
                continue;
            }
            return Poll::Ready(item);
        }
    })
    .boxed()
}

/// The server's answer, when an error of a streamed list says the server cannot stream lists:
/// a server before Kubernetes 1.27, or with the `WatchList` feature off (1.27–1.31 and 1.33
/// by default), refuses the request's options as invalid (`resourceVersionMatch` or
/// `sendInitialEvents` forbidden for watch); one whose storage cannot serve it (1.3x on an
/// etcd without progress requests) starts the watch, then ends it with an error before the
/// list is complete (`initial`). An expired watch (410) is not such an answer.
fn cannot_stream(error: &watcher::Error, initial: bool) -> Option<&kube::core::Status> {
    match error {
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
            if matches!(status.code, 400 | 422) =>
        {
            Some(status)
        }
        watcher::Error::WatchError(status) if initial && status.code != 410 => Some(status),
        _ => None,
    }
}

/// Why a watch started anew without an error of its own.
#[derive(Debug, thiserror::Error)]
#[error("the API server stopped answering; the watch starts anew")]
struct LinkLost;

/// The stream `start` makes, made anew at each epoch of `link`. A loss is also yielded (and
/// given to `lost`) as an error, so that the watch counts as failing from that moment.
fn restarting<T: Send + 'static>(
    start: impl Fn() -> BoxStream<'static, Result<T, watcher::Error>> + Send + Sync + 'static,
    mut link: watch::Receiver<LinkState>,
    lost: impl Fn(&watcher::Error) + Send + Sync + 'static,
) -> impl Stream<Item = Result<T, watcher::Error>> + Send {
    link.mark_unchanged();
    let state = (start(), link, true);
    let (start, lost) = (Arc::new(start), Arc::new(lost));
    futures::stream::unfold(state, move |(mut current, mut link, mut linked)| {
        let (start, lost) = (start.clone(), lost.clone());
        async move {
            loop {
                let next = tokio::select! {
                    item = current.next() => Either::Left(item),
                    changed = link.changed(), if linked => Either::Right(changed.is_ok()),
                };
                match next {
                    Either::Left(item) => return item.map(|item| (item, (current, link, linked))),
                    // The link's owner is gone: nothing restarts the watch any more.
                    Either::Right(false) => linked = false,
                    Either::Right(true) => {
                        current = start();
                        if !link.borrow_and_update().reachable {
                            let error = watcher::Error::WatchFailed(kube::Error::Service(
                                Box::new(LinkLost),
                            ));
                            lost(&error);
                            return Some((Err(error), (current, link, linked)));
                        }
                    }
                }
            }
        }
    })
}

/// Records list completions and recoveries of a watch, after its reflector; `listed` runs
/// each time a list is in the cache.
pub fn observe<K>(
    health: Arc<WatchHealth>,
    mut listed: impl FnMut(),
) -> impl FnMut(&Result<watcher::Event<K>, watcher::Error>) {
    move |item| {
        if let Ok(event) = item {
            health.observe_event(event);
            if matches!(event, watcher::Event::InitDone) {
                listed();
            }
        }
    }
}

/// One cache of the operator and the watch that fills it, written once for every cache: the
/// watch ([`Cache::watch`], errors counted on the cache's health), then the reflector and the
/// health of the watch ([`Cache::fill`]). What one cache adds goes between them in the chain
/// of its stream: what must see an event before it is in the cache (undecodable objects left
/// out, fields stripped, pods cut down, an observer reading the cache as it was) between
/// `watch` and `fill`; what must see it in the cache before the list counts as done, through
/// [`Cache::fill_with`]; the rest after `fill` (sweeps, echo filters, [`live_changes`]).
pub struct Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    writer: Writer<K>,
    /// The cache.
    pub reader: Store<K>,
    /// The health of the watch that fills it.
    pub health: Arc<WatchHealth>,
}

impl<K> Cache<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    /// An empty cache of `resource`, whose watch reports to `health`.
    pub fn new(resource: K::DynamicType, health: Arc<WatchHealth>) -> Self {
        let writer = Writer::new(resource);
        let reader = writer.as_reader();
        Self {
            writer,
            reader,
            health,
        }
    }

    /// The watch of `api` ([`watch`]); `W` is `K`, or what decodes to it.
    pub fn watch<W>(
        &self,
        api: kube::Api<W>,
        config: watcher::Config,
        link: &Link,
    ) -> impl Stream<Item = Result<watcher::Event<W>, watcher::Error>> + Send + use<K, W>
    where
        W: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        watch(api, config, self.health.clone(), link.subscribe())
    }

    /// `stream` into the cache, then its health ([`observe`]); `listed` runs each time a list
    /// is in the cache.
    pub fn fill<S>(
        self,
        stream: S,
        listed: impl FnMut(),
    ) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>
    where
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    {
        self.fill_with(stream, |_| {}, listed)
    }

    /// [`Cache::fill`], with `reflected` seeing each event once it is in the cache, before
    /// its health does (and so before a list counts as done): the Browsers' read-your-writes
    /// forgets deleted ones, a pod change moves its Browser's waiting reconcile.
    pub fn fill_with<S>(
        self,
        stream: S,
        reflected: impl FnMut(&Result<watcher::Event<K>, watcher::Error>),
        listed: impl FnMut(),
    ) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>
    where
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    {
        stream
            .reflect(self.writer)
            .inspect(reflected)
            .inspect(observe(self.health, listed))
    }
}

/// The objects that live watch events touched (applied; deleted too with `deleted`), for a
/// controller's triggers. A list triggers nothing here: what it brings is reconciled all at
/// once when the list is in the cache (the `listed` callback of [`observe`]), since a
/// reconcile triggered during a relist would still read the cache from before it. Errors
/// were counted and backed off upstream, and must not pause the controller.
pub fn live_changes<K, S>(
    stream: S,
    deleted: bool,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    K: Send,
{
    stream.filter_map(move |item| {
        ready(match item {
            Ok(watcher::Event::Apply(object)) => Some(Ok(object)),
            Ok(watcher::Event::Delete(object)) if deleted => Some(Ok(object)),
            _ => None,
        })
    })
}

/// The watch events of the decodable objects. An undecodable object is handed to `report`
/// and left out of a list; one that changes into an undecodable state is deleted from the
/// cache, so that no decision rests on its older content.
pub fn skip_undecodable<K, S>(
    stream: S,
    mut report: impl FnMut(&Undecodable) + Send,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    S: Stream<Item = Result<watcher::Event<Decoded<K>>, watcher::Error>> + Send,
    K: FromIdentity + Send,
{
    stream.filter_map(move |item| {
        let event = match item {
            Err(error) => Some(Err(error)),
            Ok(event) => split(event, &mut report).map(Ok),
        };
        std::future::ready(event)
    })
}

fn split<K: FromIdentity>(
    event: watcher::Event<Decoded<K>>,
    report: &mut impl FnMut(&Undecodable),
) -> Option<watcher::Event<K>> {
    use watcher::Event;
    match event {
        Event::Init => Some(Event::Init),
        Event::InitDone => Some(Event::InitDone),
        Event::Apply(Decoded::Object(k)) => Some(Event::Apply(k)),
        Event::InitApply(Decoded::Object(k)) => Some(Event::InitApply(k)),
        Event::Delete(Decoded::Object(k)) => Some(Event::Delete(k)),
        Event::Apply(Decoded::Undecodable(u)) => {
            report(&u);
            Some(Event::Delete(K::from_identity(u.metadata)))
        }
        Event::InitApply(Decoded::Undecodable(u)) => {
            report(&u);
            None
        }
        Event::Delete(Decoded::Undecodable(u)) => Some(Event::Delete(K::from_identity(u.metadata))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn health() -> Arc<WatchHealth> {
        WatchHealth::new(Watched::Browsers, Arc::new(Metrics::new()))
    }

    #[test]
    fn a_watch_is_up_once_listed_and_down_while_it_fails() {
        let h = health();
        let t0 = Instant::now();
        assert!(!h.is_up_at(t0), "not listed yet");
        h.recovered(t0, true);
        assert!(h.is_up_at(t0));
        h.error(t0);
        assert!(!h.is_up_at(t0 + Duration::from_secs(1)));
        // Errors keep coming, at most a backoff apart, while the server is away.
        let later = t0 + 2 * BACKOFF_MAX;
        h.error(later);
        assert!(!h.is_up_at(later + 2 * BACKOFF_MAX));
        // No error for longer than any backoff: the watch resumed without a relist.
        assert!(h.is_up_at(later + RETRY_BOUND));
        // Or it relisted.
        h.error(t0 + Duration::from_secs(20));
        let down = h.recovered(t0 + Duration::from_secs(23), true);
        assert_eq!(down, Some(Duration::from_secs(3)));
        assert!(h.is_up_at(t0 + Duration::from_secs(23)));
    }

    #[test]
    fn the_backoff_stays_within_a_few_seconds() {
        let mut b = backoff();
        let delays: Vec<Duration> = (0..20).map(|_| b.next().unwrap()).collect();
        assert!(delays[0] >= BACKOFF_MIN && delays[0] < 2 * BACKOFF_MIN);
        assert!(delays.iter().all(|d| *d < 2 * BACKOFF_MAX), "{delays:?}");
        assert!(2 * BACKOFF_MAX < RETRY_BOUND);
        b.reset();
        assert!(b.next().unwrap() < 2 * BACKOFF_MIN);
    }

    #[tokio::test]
    async fn a_watch_starts_anew_at_each_change_of_the_link_and_a_loss_counts_as_an_error() {
        use std::sync::atomic::{AtomicU32, Ordering};
        let link = watch::Sender::new(LinkState {
            reachable: true,
            epoch: 0,
            regained: None,
        });
        let starts = Arc::new(AtomicU32::new(0));
        let errors = Arc::new(AtomicU32::new(0));
        let start = {
            let starts = starts.clone();
            move || {
                // Each start yields its number, then waits as a quiet watch does.
                let n = starts.fetch_add(1, Ordering::SeqCst);
                futures::stream::iter([Ok(n)])
                    .chain(futures::stream::pending())
                    .boxed()
            }
        };
        let counted = errors.clone();
        let mut stream = Box::pin(restarting(start, link.subscribe(), move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        }));
        assert_eq!(stream.next().await.unwrap().unwrap(), 0);
        link.send_replace(LinkState {
            reachable: false,
            epoch: 1,
            regained: None,
        });
        let lost = stream.next().await.unwrap().unwrap_err();
        assert!(lost.to_string().contains("stopped answering"), "{lost}");
        assert_eq!(errors.load(Ordering::SeqCst), 1);
        assert_eq!(stream.next().await.unwrap().unwrap(), 1, "started anew");
        link.send_replace(LinkState {
            reachable: true,
            epoch: 2,
            regained: None,
        });
        assert_eq!(stream.next().await.unwrap().unwrap(), 2, "started anew");
        assert_eq!(
            errors.load(Ordering::SeqCst),
            1,
            "a regained link is no error"
        );
        assert_eq!(starts.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_cache_holds_a_list_before_its_hook_sees_it_and_before_it_counts_as_done() {
        use kube::api::DynamicObject;
        use kube::core::{ApiResource, GroupVersionKind};
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"));
        let cache = Cache::<DynamicObject>::new(resource.clone(), health());
        let seen = Arc::new(Mutex::new(Vec::new()));
        // What each stage sees: the objects in the cache, and whether the watch is up.
        let look = |stage: &'static str| {
            let (reader, health, seen) = (cache.reader.clone(), cache.health.clone(), seen.clone());
            move || {
                seen.lock()
                    .unwrap()
                    .push((stage, reader.state().len(), health.is_up()))
            }
        };
        let (reflected, listed) = (look("reflected"), look("listed"));
        let object = DynamicObject::new("a", &resource).within("default");
        let list = [
            watcher::Event::Init,
            watcher::Event::InitApply(object),
            watcher::Event::InitDone,
        ];
        let filled = cache.fill_with(
            futures::stream::iter(list.map(Ok)),
            move |item| {
                if matches!(item, Ok(watcher::Event::InitDone)) {
                    reflected();
                }
            },
            listed,
        );
        assert_eq!(filled.count().await, 3);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen, [("reflected", 1, false), ("listed", 1, true)]);
    }

    fn expired() -> Result<watcher::Event<()>, watcher::Error> {
        let status = Status::failure("too old resource version", "Expired").with_code(410);
        Err(watcher::Error::WatchError(Box::new(status)))
    }

    #[test]
    fn a_refused_or_broken_streamed_list_means_listing_in_pages() {
        let status = |code: u16| Status::failure("answer", "Reason").with_code(code);
        let start =
            |code| watcher::Error::WatchStartFailed(kube::Error::Api(Box::new(status(code))));
        let during = |code| watcher::Error::WatchError(Box::new(status(code)));
        let code = |error, initial| cannot_stream(&error, initial).map(|s| s.code);
        // Kubernetes 1.24, or WatchList off: the options are invalid.
        assert_eq!(code(start(422), true), Some(422));
        assert_eq!(code(start(400), true), Some(400));
        // Passing answers: the server is busy or the client not allowed.
        assert_eq!(code(start(429), true), None);
        assert_eq!(code(start(403), true), None);
        // 1.3x on etcd 3.4: the watch starts, then fails before the list is complete.
        assert_eq!(code(during(500), true), Some(500));
        assert_eq!(
            code(during(500), false),
            None,
            "after the list: a watch error"
        );
        assert_eq!(code(during(410), true), None, "expired: stream again");
    }

    #[test]
    fn one_expiry_in_a_row_skips_the_backoff() {
        let mut pass = relist_expired_at_once::<()>();
        assert!(!pass(&expired()), "the first expiry relists at once");
        assert!(pass(&expired()), "a second in a row backs off");
        assert!(pass(&Ok(watcher::Event::Init)));
        assert!(!pass(&expired()), "after a success, at once again");
    }

    /// JSON text of an object whose `spec.affinity` nests `depth` objects.
    fn deep(name: &str, depth: usize) -> String {
        let mut nested = "1".to_string();
        for _ in 0..depth {
            nested = format!("{{\"a\":{nested}}}");
        }
        format!(
            r#"{{"apiVersion":"selenosis.io/v1","kind":"BrowserConfig","metadata":{{"name":"{name}","namespace":"ns","uid":"u-{name}","resourceVersion":"7","generation":3,"managedFields":[{{"fieldsV1":{nested}}}]}},"spec":{{"template":{{"affinity":{nested}}},"browsers":{{}}}}}}"#
        )
    }

    #[test]
    fn undecodable_objects_are_reported_and_leave_the_cache() {
        use kube::api::DynamicObject;
        use serde_json::json;
        use watcher::Event;
        let object = |name: &str| -> Decoded<DynamicObject> {
            serde_json::from_value(
                json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": name}}),
            )
            .unwrap()
        };
        let bad = || -> Decoded<DynamicObject> { serde_json::from_str(&deep("bad", 200)).unwrap() };
        let mut reported = Vec::new();
        let mut report =
            |u: &Undecodable| reported.push(u.metadata.name.clone().unwrap_or_default());
        let name = |e: Option<Event<DynamicObject>>| match e {
            Some(Event::Apply(k)) => format!("apply {}", k.metadata.name.unwrap_or_default()),
            Some(Event::InitApply(k)) => format!("init {}", k.metadata.name.unwrap_or_default()),
            Some(Event::Delete(k)) => format!("delete {}", k.metadata.name.unwrap_or_default()),
            Some(Event::Init) => "Init".into(),
            Some(Event::InitDone) => "InitDone".into(),
            None => "skipped".into(),
        };
        let seen = [
            name(split(Event::Init, &mut report)),
            name(split(Event::InitApply(object("good")), &mut report)),
            name(split(Event::InitApply(bad()), &mut report)),
            name(split(Event::InitDone, &mut report)),
            name(split(Event::Apply(bad()), &mut report)),
            name(split(Event::Delete(bad()), &mut report)),
        ];
        assert_eq!(
            seen,
            [
                "Init",
                "init good",
                "skipped",
                "InitDone",
                "delete bad",
                "delete bad"
            ]
        );
        assert_eq!(reported, ["bad", "bad"]);
    }
}
