//! A stand-in for the garbage collector of a real cluster (kube-controller-manager's), which
//! the benchmark's control plane lacks, for an operator that relies on it: the Go controller
//! deletes a Browser whose session ended and leaves its pod to the collector. Once the Browser
//! that controls a pod is gone, the pod is deleted as the collector deletes dependents: in the
//! background, gracefully, only if it is still the same pod. It watches the namespace's
//! Browsers and the operator's pods and sends a request only for a pod to collect, under the
//! benchmark's own identity (a cluster's collector is not the operator either).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use browser_controller::api::keys;
use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use crate::Kinds;

/// The collector's task; stopped when dropped.
pub struct Collector {
    stop: Option<oneshot::Sender<()>>,
    collected: Arc<AtomicUsize>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// What the collector knows of the namespace.
#[derive(Default)]
struct Graph {
    /// uids of the Browsers that exist.
    browsers: HashSet<String>,
    /// uids of the Browsers seen deleted.
    gone: HashSet<String>,
    /// The live pods not being deleted: name → (uid, uid of the Browser that controls it).
    pods: HashMap<String, (String, String)>,
    /// The Browsers listed by the current relist, to find those deleted during a watch gap.
    relist: Option<HashSet<String>>,
}

impl Graph {
    /// The pods whose Browser is gone, taken out of the graph: (name, uid).
    fn orphans(&mut self) -> Vec<(String, String)> {
        let orphans: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, (_, owner))| self.gone.contains(owner))
            .map(|(name, _)| name.clone())
            .collect();
        orphans
            .into_iter()
            .filter_map(|name| {
                let (uid, _) = self.pods.remove(&name)?;
                Some((name, uid))
            })
            .collect()
    }

    fn browser_event(&mut self, event: watcher::Event<DynamicObject>) {
        match event {
            watcher::Event::Apply(b) => {
                self.browsers.extend(b.uid());
            }
            watcher::Event::Delete(b) => {
                if let Some(uid) = b.uid() {
                    self.browsers.remove(&uid);
                    self.gone.insert(uid);
                }
            }
            watcher::Event::Init => self.relist = Some(HashSet::new()),
            watcher::Event::InitApply(b) => {
                if let (Some(list), Some(uid)) = (self.relist.as_mut(), b.uid()) {
                    list.insert(uid);
                }
            }
            watcher::Event::InitDone => {
                if let Some(list) = self.relist.take() {
                    let vanished = self.browsers.difference(&list).cloned();
                    self.gone.extend(vanished);
                    self.browsers = list;
                }
            }
        }
    }

    fn pod_event(&mut self, event: watcher::Event<DynamicObject>) {
        match event {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                let owner = pod
                    .owner_references()
                    .iter()
                    .find(|o| o.controller == Some(true))
                    .map(|o| o.uid.clone());
                match (owner, pod.uid(), pod.metadata.deletion_timestamp.is_none()) {
                    (Some(owner), Some(uid), true) => {
                        self.pods.insert(pod.name_any(), (uid, owner));
                    }
                    _ => {
                        self.pods.remove(&pod.name_any());
                    }
                }
            }
            watcher::Event::Delete(pod) => {
                self.pods.remove(&pod.name_any());
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }
}

impl Collector {
    /// Starts collecting in namespace `ns` on the current runtime.
    pub fn start(client: Client, ns: &str, kinds: &Kinds) -> Self {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let collected = Arc::new(AtomicUsize::new(0));
        let count = collected.clone();
        let browsers: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &kinds.browser);
        let pods: Api<DynamicObject> = Api::namespaced_with(client, ns, &kinds.pod);
        tokio::spawn(async move {
            let mut browser_events = watcher(browsers, watcher::Config::default())
                .default_backoff()
                .boxed();
            let mut pod_events = watcher(
                pods.clone(),
                watcher::Config::default().labels(&keys::managed_pods_selector()),
            )
            .default_backoff()
            .boxed();
            let mut graph = Graph::default();
            let mut deletes = JoinSet::new();
            loop {
                tokio::select! {
                    _ = &mut stopped => return,
                    Some(event) = browser_events.next() => {
                        if let Ok(event) = event {
                            graph.browser_event(event);
                        }
                    }
                    Some(event) = pod_events.next() => {
                        if let Ok(event) = event {
                            graph.pod_event(event);
                        }
                    }
                    Some(_) = deletes.join_next(), if !deletes.is_empty() => continue,
                }
                for (name, uid) in graph.orphans() {
                    let pods = pods.clone();
                    let count = count.clone();
                    deletes.spawn(async move {
                        let params = DeleteParams {
                            preconditions: Some(Preconditions {
                                uid: Some(uid),
                                resource_version: None,
                            }),
                            ..DeleteParams::background()
                        };
                        // Gone already, or replaced by another pod of that name: nothing to do.
                        if pods.delete(&name, &params).await.is_ok() {
                            count.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
            }
        });
        Collector {
            stop: Some(stop),
            collected,
        }
    }

    /// Pods deleted so far.
    pub fn collected(&self) -> usize {
        self.collected.load(Ordering::Relaxed)
    }
}
