//! The API server double and the kubelet simulator, exercised only through `kube::Client`,
//! kube-runtime and the double's test hooks.

use testkit as support;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, Preconditions, WatchParams,
};
use kube::core::WatchEvent;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt, discovery};
use serde_json::{Value, json};

use browser_controller::api::crd::Layout;
use support::apiserver::{ApiServer, Fault};
use support::fixtures::{browser, pod};
use support::kinds::{browser_resource, pod_resource};
use support::kubelet::{Kubelet, Script};

fn browser_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "browsers.selenosis.io"},
        "spec": {
            "group": "selenosis.io",
            "scope": "Namespaced",
            "names": {
                "plural": "browsers", "singular": "browser", "kind": "Browser",
                "shortNames": ["brw"], "categories": ["selenosis"],
            },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
    })
}

/// A server with the Browser CRD, a client, and the Browser API in `default`.
async fn setup() -> (ApiServer, Client, Api<DynamicObject>) {
    let server = ApiServer::new();
    server.install_crd(&browser_crd()).unwrap();
    let client = server.client();
    let gvk = GroupVersionKind::gvk("selenosis.io", "v1", "Browser");
    let (ar, _) = discovery::pinned_kind(&client, &gvk).await.unwrap();
    let browsers = Api::namespaced_with(client.clone(), "default", &ar);
    (server, client, browsers)
}

fn pods(client: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), "default", &pod_resource())
}

/// A fixture or a JSON object as kube reads it.
fn obj(value: impl Into<Value>) -> DynamicObject {
    serde_json::from_value(value.into()).unwrap()
}

async fn create(api: &Api<DynamicObject>, value: impl Into<Value>) -> DynamicObject {
    api.create(&PostParams::default(), &obj(value))
        .await
        .unwrap()
}

fn api_error(result: Result<impl std::fmt::Debug, kube::Error>) -> Box<kube::core::Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn apply(manager: &str) -> PatchParams {
    PatchParams::apply(manager).force()
}

/// Polls `check` until it returns `Some` (or panics after 10s of no luck).
async fn eventually<T, F, Fut>(mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..1000 {
        if let Some(v) = check().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not reached within 10s");
}

fn finalizers(o: &DynamicObject) -> Vec<String> {
    o.metadata.finalizers.clone().unwrap_or_default()
}

fn labels(o: &DynamicObject) -> Vec<String> {
    o.metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_keys()
        .collect()
}

#[tokio::test]
async fn discovery_finds_the_crd_kind_and_built_ins() {
    let (server, client, _) = setup().await;
    let info = client.apiserver_version().await.unwrap();
    assert_eq!(info.git_version, "v1.34.0");
    server.set_git_version("v1.30.2");
    let info = client.apiserver_version().await.unwrap();
    assert_eq!((info.major.as_str(), info.minor.as_str()), ("1", "30"));

    let group = discovery::group(&client, "selenosis.io").await.unwrap();
    assert_eq!(group.preferred_version_or_latest(), "v1");
    let (ar, caps) = group.recommended_kind("Browser").unwrap();
    assert_eq!(ar.plural, "browsers");
    assert_eq!(caps.scope, discovery::Scope::Namespaced);
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "status"));

    let resources = client
        .list_api_group_resources("selenosis.io/v1")
        .await
        .unwrap();
    let entry = &resources.resources[0];
    assert_eq!(entry.short_names.as_deref(), Some(&["brw".to_string()][..]));
    assert_eq!(
        entry.categories.as_deref(),
        Some(&["selenosis".to_string()][..])
    );

    let gvk = GroupVersionKind::gvk("", "v1", "Pod");
    let (pods, caps) = discovery::pinned_kind(&client, &gvk).await.unwrap();
    assert_eq!(pods.plural, "pods");
    let subs: Vec<&str> = caps
        .subresources
        .iter()
        .map(|(s, _)| s.plural.as_str())
        .collect();
    assert_eq!(subs, ["status", "binding"]);
    let lease = GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease");
    assert!(discovery::pinned_kind(&client, &lease).await.is_ok());
    let missing = GroupVersionKind::gvk("browser.selenosis.io", "v1", "Browser");
    assert!(discovery::pinned_kind(&client, &missing).await.is_err());

    let full = discovery::Discovery::new(client.clone())
        .run()
        .await
        .unwrap();
    assert!(full.has_group("selenosis.io") && full.has_group("coordination.k8s.io"));
    let aggregated = discovery::Discovery::new(client)
        .run_aggregated()
        .await
        .unwrap();
    let (ar, caps) = aggregated
        .get("selenosis.io")
        .and_then(|g| g.recommended_kind("Browser"))
        .unwrap();
    assert_eq!(ar.plural, "browsers");
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "status"));
    assert!(aggregated.has_group(""));
}

#[tokio::test]
async fn crds_posted_through_the_api_are_served() {
    let server = ApiServer::new();
    let client = server.client();
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let crd = create(&crds, browser_crd()).await;
    let established = crd.data["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Established" && c["status"] == "True");
    assert!(established);
    let group = discovery::group(&client, "selenosis.io").await.unwrap();
    assert!(group.recommended_kind("Browser").is_some());
}

#[tokio::test]
async fn create_get_list_and_resource_versions() {
    let (_server, _client, browsers) = setup().await;
    let a = create(&browsers, browser("a")).await;
    let b = create(&browsers, browser("b")).await;
    let rv = |o: &DynamicObject| {
        o.metadata
            .resource_version
            .clone()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(rv(&b) > rv(&a));
    assert_eq!(a.metadata.generation, Some(1));
    assert_eq!(a.metadata.namespace.as_deref(), Some("default"));
    assert!(a.metadata.uid.is_some() && a.metadata.creation_timestamp.is_some());
    assert_ne!(a.metadata.uid, b.metadata.uid);

    let got = browsers.get("a").await.unwrap();
    assert_eq!(got.data["spec"]["browserName"], "chrome");
    let list = browsers.list(&ListParams::default()).await.unwrap();
    let names: Vec<_> = list
        .items
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert!(
        list.metadata
            .resource_version
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= rv(&b)
    );

    let again = api_error(
        browsers
            .create(&PostParams::default(), &obj(browser("a")))
            .await,
    );
    assert_eq!((again.code, again.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(again.message, "browsers.selenosis.io \"a\" already exists");
    let missing = api_error(browsers.get("nope").await);
    assert_eq!(
        (missing.code, missing.message.as_str()),
        (404, "browsers.selenosis.io \"nope\" not found")
    );

    let generated = create(
        &browsers,
        json!({"apiVersion": "selenosis.io/v1", "kind": "Browser", "metadata": {"generateName": "chrome-"}, "spec": {}}),
    )
    .await;
    assert!(generated.metadata.name.unwrap().starts_with("chrome-"));
}

#[tokio::test]
async fn label_and_field_selectors_on_lists() {
    let (_server, client, browsers) = setup().await;
    for (name, labels) in [
        ("a", json!({"tier": "web", "env": "prod"})),
        ("b", json!({"tier": "db"})),
        ("c", json!({})),
    ] {
        create(&browsers, browser(name).labels(labels)).await;
    }
    let cases = [
        ("tier=web", vec!["a"]),
        ("tier==db", vec!["b"]),
        ("tier!=web", vec!["b", "c"]),
        ("tier in (web,db)", vec!["a", "b"]),
        ("tier notin (web)", vec!["b", "c"]),
        ("env", vec!["a"]),
        ("!env", vec!["b", "c"]),
        ("tier=web,env=prod", vec!["a"]),
    ];
    for (selector, want) in cases {
        let list = browsers
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap();
        let names: Vec<_> = list
            .items
            .iter()
            .filter_map(|o| o.metadata.name.clone())
            .collect();
        assert_eq!(names, want, "{selector}");
    }
    let by_name = browsers
        .list(&ListParams::default().fields("metadata.name=b"))
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 1);
    let bad = api_error(
        browsers
            .list(&ListParams::default().fields("spec.x=1"))
            .await,
    );
    assert_eq!(bad.code, 400);
    let other = Api::namespaced_with(client.clone(), "other", &browser_resource(Layout::Default));
    create(&other, browser("d")).await;
    let all = Api::<DynamicObject>::all_with(client, &browser_resource(Layout::Default));
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        4
    );
    assert_eq!(
        browsers
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        3
    );
}

#[tokio::test]
async fn watcher_and_reflector_see_changes_in_order() {
    let (_server, client, browsers) = setup().await;
    create(&browsers, browser("before")).await;
    let writer = reflector::store::Writer::new(browser_resource(Layout::Default));
    let reader = writer.as_reader();
    let all = Api::<DynamicObject>::all_with(client, &browser_resource(Layout::Default));
    let mut events = reflector(writer, watcher(all, watcher::Config::default()))
        .default_backoff()
        .boxed();
    let mut seen = Vec::new();
    let mut next = async || {
        loop {
            let ev = tokio::time::timeout(Duration::from_secs(10), events.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            match ev {
                watcher::Event::Apply(o) => return ("apply", o),
                watcher::Event::InitApply(o) => return ("init", o),
                watcher::Event::Delete(o) => return ("delete", o),
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
        }
    };
    let (kind, o) = next().await;
    assert_eq!((kind, o.metadata.name.as_deref()), ("init", Some("before")));

    create(&browsers, browser("x")).await;
    let patch = Patch::Merge(json!({"spec": {"browserVersion": "121.0"}}));
    browsers
        .patch("x", &PatchParams::default(), &patch)
        .await
        .unwrap();
    browsers
        .delete("x", &DeleteParams::default())
        .await
        .unwrap();

    for _ in 0..3 {
        let (kind, o) = next().await;
        seen.push((
            kind,
            o.metadata.generation,
            o.data["spec"]["browserVersion"].clone(),
        ));
    }
    assert_eq!(
        seen,
        [
            ("apply", Some(1), json!("139.0")),
            ("apply", Some(2), json!("121.0")),
            ("delete", Some(2), json!("121.0")),
        ]
    );
    reader.wait_until_ready().await.unwrap();
    let names: Vec<_> = reader
        .state()
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    assert_eq!(names, ["before"]);
}

#[tokio::test]
async fn streaming_list_watch_ends_initial_events_with_a_bookmark() {
    let (_server, client, browsers) = setup().await;
    create(&browsers, browser("a")).await;
    let all = Api::<DynamicObject>::all_with(client, &browser_resource(Layout::Default));
    let config = watcher::Config::default().streaming_lists();
    let mut events = watcher(all, config).boxed();
    let mut got = Vec::new();
    while got.last() != Some(&"done".to_string()) {
        let ev = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match ev {
            watcher::Event::Init => got.push("init".to_string()),
            watcher::Event::InitApply(o) => got.push(o.metadata.name.unwrap()),
            watcher::Event::InitDone => got.push("done".to_string()),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(got, ["init", "a", "done"]);
}

#[tokio::test]
async fn raw_watch_replays_from_a_resource_version_and_sends_bookmarks() {
    let (server, _client, browsers) = setup().await;
    server.set_bookmark_interval(Duration::from_millis(20));
    let a = create(&browsers, browser("a")).await;
    let rv = a.metadata.resource_version.unwrap();
    create(&browsers, browser("b")).await;
    browsers
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();

    let mut stream = browsers
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let mut kinds = Vec::new();
    while kinds.len() < 3 {
        let ev = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        kinds.push(match ev {
            WatchEvent::Added(o) => format!("ADDED {}", o.metadata.name.unwrap()),
            WatchEvent::Deleted(o) => format!("DELETED {}", o.metadata.name.unwrap()),
            WatchEvent::Bookmark(b) => format!(
                "BOOKMARK {}",
                b.metadata.resource_version == server.resource_version().to_string()
            ),
            other => panic!("unexpected {other:?}"),
        });
    }
    assert_eq!(kinds, ["ADDED b", "DELETED a", "BOOKMARK true"]);

    // Later bookmarks follow the global resourceVersion.
    let c = create(&browsers, browser("c")).await;
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let WatchEvent::Bookmark(b) = ev
            && Some(&b.metadata.resource_version) == c.metadata.resource_version.as_ref()
        {
            break;
        }
    }

    server.compact();
    let mut stale = browsers
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match stale.try_next().await.unwrap().unwrap() {
        WatchEvent::Error(status) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected 410, got {other:?}"),
    }
}

#[tokio::test]
async fn label_selector_watch_sees_objects_leave_and_enter_the_selection() {
    let (_server, _client, browsers) = setup().await;
    create(&browsers, browser("x").labels(json!({"team": "a"}))).await;
    let config = watcher::Config::default().labels("team=a");
    let mut events = watcher(browsers.clone(), config)
        .default_backoff()
        .applied_objects()
        .boxed();
    let mut deletes = watcher(
        browsers.clone(),
        watcher::Config::default().labels("team=a"),
    )
    .default_backoff()
    .boxed();
    let first = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.metadata.name.as_deref(), Some("x"));
    // Streams are lazy: let the second watcher list before the object leaves the selection.
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(10), deletes.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if matches!(ev, watcher::Event::InitDone) {
            break;
        }
    }

    let relabel = |team: &str| Patch::Merge(json!({"metadata": {"labels": {"team": team}}}));
    browsers
        .patch("x", &PatchParams::default(), &relabel("b"))
        .await
        .unwrap();
    let mut left = None;
    while left.is_none() {
        let ev = tokio::time::timeout(Duration::from_secs(10), deletes.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let watcher::Event::Delete(o) = ev {
            left = Some(o);
        }
    }
    // The DELETED event carries the last state that matched.
    assert_eq!(
        left.unwrap().labels().get("team").map(String::as_str),
        Some("a")
    );

    browsers
        .patch("x", &PatchParams::default(), &relabel("a"))
        .await
        .unwrap();
    let back = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(back.labels().get("team").map(String::as_str), Some("a"));
}

#[tokio::test]
async fn server_side_apply_creates_merges_and_treats_finalizers_as_sets() {
    let (_server, _client, browsers) = setup().await;
    let applied = |labels: Value, finalizers: Value| {
        let mut b = browser("s").labels(labels).build();
        b["metadata"]["finalizers"] = finalizers;
        Patch::Apply(b)
    };
    let created = browsers
        .patch(
            "s",
            &apply("ctl"),
            &applied(json!({"a": "1"}), json!(["ctl/f"])),
        )
        .await
        .unwrap();
    assert_eq!(finalizers(&created), ["ctl/f"]);
    let managers: Vec<_> = created
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .map(|m| (m.manager.unwrap(), m.operation.unwrap()))
        .collect();
    assert_eq!(managers, [("ctl".to_string(), "Apply".to_string())]);

    let both = browsers
        .patch(
            "s",
            &apply("hub"),
            &applied(json!({"b": "2"}), json!(["hub/f"])),
        )
        .await
        .unwrap();
    assert_eq!(finalizers(&both), ["ctl/f", "hub/f"]);
    assert_eq!(labels(&both), ["a", "b"]);

    // `ctl` drops its finalizer and label: only what it owned goes.
    let after = browsers
        .patch("s", &apply("ctl"), &applied(json!({}), json!([])))
        .await
        .unwrap();
    assert_eq!(finalizers(&after), ["hub/f"]);
    assert_eq!(labels(&after), ["b"]);
    assert_eq!(after.data["spec"]["browserName"], "chrome");

    // A finalizer added by a plain update is not owned by `ctl`, so its apply keeps it.
    let add = Patch::Json::<()>(
        serde_json::from_value(json!([
            {"op": "add", "path": "/metadata/finalizers/-", "value": "other/f"}
        ]))
        .unwrap(),
    );
    browsers
        .patch("s", &PatchParams::default(), &add)
        .await
        .unwrap();
    let kept = browsers
        .patch("s", &apply("ctl"), &applied(json!({}), json!(["ctl/f"])))
        .await
        .unwrap();
    assert_eq!(finalizers(&kept), ["hub/f", "other/f", "ctl/f"]);

    // Conflicts without force, ownership moves with force.
    let steal = applied(json!({"b": "3"}), json!([]));
    let conflict = api_error(
        browsers
            .patch("s", &PatchParams::apply("ctl"), &steal)
            .await,
    );
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    assert!(
        conflict.message.contains("conflict with \"hub\""),
        "{}",
        conflict.message
    );
    let forced = browsers.patch("s", &apply("ctl"), &steal).await.unwrap();
    assert_eq!(forced.labels().get("b").map(String::as_str), Some("3"));

    // A re-apply of the same configuration changes nothing, not even the resourceVersion.
    let again = browsers.patch("s", &apply("ctl"), &steal).await.unwrap();
    assert_eq!(
        again.metadata.resource_version,
        forced.metadata.resource_version
    );
}

#[tokio::test]
async fn apply_requires_field_manager_api_version_and_kind() {
    let (_server, _client, browsers) = setup().await;
    let no_manager = api_error(
        browsers
            .patch("s", &PatchParams::default(), &Patch::Apply(browser("s")))
            .await,
    );
    assert_eq!(no_manager.code, 422);
    assert_eq!(
        no_manager.message,
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    let bare = json!({"metadata": {"name": "s"}, "spec": {}});
    let no_kind = api_error(
        browsers
            .patch("s", &apply("ctl"), &Patch::Apply(bare))
            .await,
    );
    assert_eq!((no_kind.code, no_kind.reason.as_str()), (400, "BadRequest"));
}

#[tokio::test]
async fn status_subresource_is_isolated_from_the_main_resource() {
    let (_server, _client, browsers) = setup().await;
    let created = create(&browsers, browser("s").phase("Running")).await;
    assert!(
        created.data.get("status").is_none(),
        "status is dropped on create"
    );

    let both =
        Patch::Merge(json!({"spec": {"browserVersion": "2"}, "status": {"phase": "Failed"}}));
    let main = browsers
        .patch("s", &PatchParams::default(), &both)
        .await
        .unwrap();
    assert!(main.data.get("status").is_none());
    assert_eq!(main.metadata.generation, Some(2));

    let status = browsers
        .patch_status("s", &PatchParams::default(), &both)
        .await
        .unwrap();
    assert_eq!(status.data["status"]["phase"], "Failed");
    assert_eq!(status.data["spec"]["browserVersion"], "2");
    assert_eq!(
        status.metadata.generation,
        Some(2),
        "status writes keep the generation"
    );

    // Server-side apply on /status: fields the manager stops sending are removed.
    let full = json!({"apiVersion": "selenosis.io/v1", "kind": "Browser", "status": {"phase": "Pending", "reason": "Waiting"}});
    browsers
        .patch_status("s", &apply("ctl"), &Patch::Apply(full))
        .await
        .unwrap();
    let less =
        json!({"apiVersion": "selenosis.io/v1", "kind": "Browser", "status": {"phase": "Running"}});
    let now = browsers
        .patch_status("s", &apply("ctl"), &Patch::Apply(less))
        .await
        .unwrap();
    assert_eq!(now.data["status"], json!({"phase": "Running"}));

    // A stale resourceVersion in the body is a precondition failure.
    let stale =
        Patch::Merge(json!({"metadata": {"resourceVersion": "1"}, "status": {"phase": "Failed"}}));
    let err = api_error(
        browsers
            .patch_status("s", &PatchParams::default(), &stale)
            .await,
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));

    // PUT replaces and honours the resourceVersion precondition too.
    let mut current = browsers.get("s").await.unwrap();
    current.data["spec"]["browserVersion"] = json!("3");
    let replaced = browsers
        .replace("s", &PostParams::default(), &current)
        .await
        .unwrap();
    assert_eq!(replaced.metadata.generation, Some(3));
    let err = api_error(
        browsers
            .replace("s", &PostParams::default(), &current)
            .await,
    );
    assert_eq!(err.code, 409);
}

#[tokio::test]
async fn json_patch_test_failure_is_unprocessable() {
    let (_server, _client, browsers) = setup().await;
    create(&browsers, browser("j")).await;
    let guarded = |value: &str| {
        Patch::Json::<()>(
            serde_json::from_value(json!([
                {"op": "test", "path": "/spec/browserName", "value": value},
                {"op": "replace", "path": "/spec/browserName", "value": "firefox"},
            ]))
            .unwrap(),
        )
    };
    let err = api_error(
        browsers
            .patch("j", &PatchParams::default(), &guarded("edge"))
            .await,
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    let ok = browsers
        .patch("j", &PatchParams::default(), &guarded("chrome"))
        .await
        .unwrap();
    assert_eq!(ok.data["spec"]["browserName"], "firefox");

    // A `test` for null passes on a missing member, as kube's finalizer helper expects.
    let add_first = Patch::Json::<()>(
        serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["a/b"]},
        ]))
        .unwrap(),
    );
    let added = browsers
        .patch("j", &PatchParams::default(), &add_first)
        .await
        .unwrap();
    assert_eq!(finalizers(&added), ["a/b"]);
    let err = api_error(
        browsers
            .patch("j", &PatchParams::default(), &add_first)
            .await,
    );
    assert_eq!(err.code, 422);
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let (_server, _client, browsers) = setup().await;
    create(&browsers, browser("f").finalized()).await;
    let deleted = browsers
        .delete("f", &DeleteParams::default())
        .await
        .unwrap();
    let marked = deleted.left().unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(0));
    assert_eq!(marked.metadata.generation, Some(2));
    assert!(browsers.get("f").await.is_ok());

    let add = Patch::Merge(
        json!({"metadata": {"finalizers": ["browserpod.selenosis.io/finalizer", "x/y"]}}),
    );
    let err = api_error(browsers.patch("f", &PatchParams::default(), &add).await);
    assert_eq!(err.code, 422);

    let clear = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    browsers
        .patch("f", &PatchParams::default(), &clear)
        .await
        .unwrap();
    assert_eq!(api_error(browsers.get("f").await).code, 404);
}

#[tokio::test]
async fn delete_preconditions_and_dry_run() {
    let (server, _client, browsers) = setup().await;
    create(&browsers, browser("d")).await;
    let wrong = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("nope".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let err = api_error(browsers.delete("d", &wrong).await);
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(
        err.message
            .contains("Precondition failed: UID in precondition: nope"),
        "{}",
        err.message
    );

    let rv = server.resource_version();
    let dry_post = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let made = browsers
        .create(&dry_post, &obj(browser("ghost")))
        .await
        .unwrap();
    assert_eq!(made.metadata.name.as_deref(), Some("ghost"));
    browsers
        .patch(
            "ghost2",
            &apply("ctl").dry_run(),
            &Patch::Apply(browser("ghost2")),
        )
        .await
        .unwrap();
    let dry_delete = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    browsers.delete("d", &dry_delete).await.unwrap();
    let dry_patch = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    browsers
        .patch(
            "d",
            &dry_patch,
            &Patch::Merge(json!({"spec": {"browserName": "x"}})),
        )
        .await
        .unwrap();

    assert_eq!(server.resource_version(), rv, "dry-run stores nothing");
    assert_eq!(api_error(browsers.get("ghost").await).code, 404);
    assert_eq!(api_error(browsers.get("ghost2").await).code, 404);
    assert_eq!(
        browsers.get("d").await.unwrap().data["spec"]["browserName"],
        "chrome"
    );
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.verb == "delete" && r.dry_run)
    );
}

#[tokio::test]
async fn pods_unbound_go_at_once_bound_ones_wait_for_the_kubelet() {
    let (_server, client, _) = setup().await;
    let pods = pods(&client);
    let created = pods
        .patch("p", &apply("ctl"), &Patch::Apply(pod("p")))
        .await
        .unwrap();
    assert_eq!(created.data["status"]["phase"], "Pending");
    assert_eq!(created.data["spec"]["terminationGracePeriodSeconds"], 30);
    pods.delete("p", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_error(pods.get("p").await).code, 404);

    create(&pods, pod("q")).await;
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "q"}, "target": {"kind": "Node", "name": "n1"}});
    pods.create_subresource::<_, Value>("binding", "q", &PostParams::default(), &binding)
        .await
        .unwrap();
    let again = pods
        .create_subresource::<_, Value>("binding", "q", &PostParams::default(), &binding)
        .await;
    assert_eq!(api_error(again).code, 409);
    let terminating = pods
        .delete("q", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(terminating.data["spec"]["nodeName"], "n1");
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    assert!(pods.get("q").await.is_ok());
    pods.delete(
        "q",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(api_error(pods.get("q").await).code, 404);
}

#[tokio::test]
async fn pod_spec_is_immutable_except_images() {
    let (_server, client, _) = setup().await;
    let pods = pods(&client);
    pods.patch("p", &apply("ctl"), &Patch::Apply(pod("p")))
        .await
        .unwrap();
    let same = pods
        .patch("p", &apply("ctl"), &Patch::Apply(pod("p")))
        .await
        .unwrap();
    assert_eq!(
        same.data["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );

    let mut image = pod("p").build();
    image["spec"]["containers"][0]["image"] = json!("selenium/standalone-chrome:121.0");
    pods.patch("p", &apply("ctl"), &Patch::Apply(image))
        .await
        .unwrap();

    let mut changed = pod("p").build();
    changed["spec"]["containers"][0]["ports"][0]["containerPort"] = json!(5555);
    let err = api_error(pods.patch("p", &apply("ctl"), &Patch::Apply(changed)).await);
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert!(
        err.message.starts_with("Pod \"p\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn pod_validation_reports_field_errors_like_the_api_server() {
    let (server, client, _) = setup().await;
    let pods = pods(&client);
    let mut bad = pod("v").build();
    bad["spec"]["containers"][0]["image"] = json!("");
    let err = api_error(pods.create(&PostParams::default(), &obj(bad.clone())).await);
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        err.message,
        "Pod \"v\" is invalid: spec.containers[0].image: Required value"
    );
    let causes = err.details.unwrap().causes;
    assert_eq!(causes[0].field, "spec.containers[0].image");
    assert_eq!(causes[0].reason, "FieldValueRequired");

    // Dry-run apply validates the same way.
    let dry = api_error(
        pods.patch("v", &apply("ctl").dry_run(), &Patch::Apply(bad))
            .await,
    );
    assert_eq!(dry.code, 422);

    let mut several = pod("w").build();
    several["spec"]["containers"][1]["name"] = json!("browser");
    several["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "data", "mountPath": "/data"}]);
    several["spec"]["restartPolicy"] = json!("Sometimes");
    let err = api_error(pods.create(&PostParams::default(), &obj(several)).await);
    assert_eq!(
        err.message,
        "Pod \"w\" is invalid: [spec.containers[0].volumeMounts[0].name: Not found: \"data\", spec.containers[1].name: Duplicate value: \"browser\", spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"]"
    );

    let mut quantity = pod("q").build();
    quantity["spec"]["containers"][0]["resources"] = json!({"limits": {"memory": "1Gx"}});
    let err = api_error(pods.create(&PostParams::default(), &obj(quantity)).await);
    assert_eq!(err.code, 400);
    assert!(server.list("pods", "default").is_empty());
}

#[tokio::test]
async fn injected_faults_fail_matching_requests() {
    let (server, client, browsers) = setup().await;
    let pods = pods(&client);
    server.inject(
        Fault::new("create", "pods", 403, "Forbidden", "pods \"p\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1")
            .times(1),
    );
    let err = api_error(
        pods.patch("p", &apply("browser-controller"), &Patch::Apply(pod("p")))
            .await,
    );
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    assert!(err.message.contains("exceeded quota"));
    pods.patch("p", &apply("browser-controller"), &Patch::Apply(pod("p")))
        .await
        .unwrap();

    server.inject(
        Fault::new(
            "get",
            "browsers",
            504,
            "Timeout",
            "the server was unable to return a response in the time allotted",
        )
        .object("default", "b"),
    );
    create(&browsers, browser("b")).await;
    assert_eq!(api_error(browsers.get("b").await).code, 504);
    assert_eq!(api_error(browsers.get("b").await).code, 504);
    server.clear_faults();
    assert!(browsers.get("b").await.is_ok());

    server.inject(
        Fault::new("patch", "browsers", 500, "InternalError", "boom")
            .subresource("status")
            .times(1),
    );
    let status = Patch::Merge(json!({"status": {"phase": "Running"}}));
    let err = api_error(
        browsers
            .patch_status("b", &PatchParams::default(), &status)
            .await,
    );
    assert_eq!((err.code, err.message.as_str()), (500, "boom"));
    browsers
        .patch("b", &PatchParams::default(), &status)
        .await
        .unwrap();
    browsers
        .patch_status("b", &PatchParams::default(), &status)
        .await
        .unwrap();

    let records = server.requests();
    let pod_writes: Vec<_> = records
        .iter()
        .filter(|r| r.resource == "pods")
        .map(|r| (r.verb.as_str(), r.patch_type.as_deref(), r.status))
        .collect();
    assert_eq!(
        pod_writes,
        [("patch", Some("apply"), 403), ("patch", Some("apply"), 201)]
    );
}

/// Drives a watcher in the background and forwards the names of applied objects.
fn watch_names(api: Api<DynamicObject>) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(item) = stream.next().await {
            if let Ok(o) = item
                && tx.send(o.metadata.name.unwrap()).is_err()
            {
                return;
            }
        }
    });
    rx
}

async fn recv(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn watchers_recover_from_dropped_watches_and_compaction() {
    let (server, client, browsers) = setup().await;
    let mut names = watch_names(Api::all_with(client, &browser_resource(Layout::Default)));
    create(&browsers, browser("one")).await;
    assert_eq!(recv(&mut names).await, "one");
    eventually(async || (server.open_watches() == 1).then_some(())).await;

    server.drop_watches();
    create(&browsers, browser("two")).await;
    assert_eq!(recv(&mut names).await, "two");
    eventually(async || (server.open_watches() == 1).then_some(())).await;
    let lists = server
        .requests()
        .iter()
        .filter(|r| r.verb == "list")
        .count();
    assert_eq!(lists, 1, "a dropped watch resumes from its resourceVersion");

    // Keep the watcher from resuming while "three" is written and the log compacted: its
    // resumed watch then gets 410 Gone, so it relists and sees everything again.
    server.inject(Fault::new(
        "watch",
        "browsers",
        500,
        "InternalError",
        "etcd unavailable",
    ));
    server.drop_watches();
    eventually(async || {
        let failed = server
            .requests()
            .iter()
            .any(|r| r.verb == "watch" && r.status == 500);
        failed.then_some(())
    })
    .await;
    create(&browsers, browser("three")).await;
    server.compact();
    server.clear_faults();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        seen.push(recv(&mut names).await);
    }
    seen.sort();
    assert_eq!(seen, ["one", "three", "two"]);
    let lists = server
        .requests()
        .iter()
        .filter(|r| r.verb == "list")
        .count();
    assert_eq!(lists, 2);
}

#[tokio::test]
async fn access_reviews_allow_unless_denied() {
    let (server, client, _) = setup().await;
    let reviews: Api<DynamicObject> = Api::all_with(
        client,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("authorization.k8s.io", "v1", "SelfSubjectAccessReview"),
            "selfsubjectaccessreviews",
        ),
    );
    let review = |verb: &str| {
        obj(json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "metadata": {},
            "spec": {"resourceAttributes": {"verb": verb, "group": "", "resource": "pods"}},
        }))
    };
    let allowed = reviews
        .create(&PostParams::default(), &review("delete"))
        .await
        .unwrap();
    assert_eq!(allowed.data["status"]["allowed"], true);
    server.deny("delete", "", "pods");
    let denied = reviews
        .create(&PostParams::default(), &review("delete"))
        .await
        .unwrap();
    assert_eq!(denied.data["status"]["allowed"], false);
}

#[tokio::test]
async fn access_denials_name_subresources_and_namespaces_like_rbac_rules() {
    let (server, client, _) = setup().await;
    let reviews: Api<DynamicObject> = Api::all_with(
        client,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("authorization.k8s.io", "v1", "SelfSubjectAccessReview"),
            "selfsubjectaccessreviews",
        ),
    );
    let allowed = |attributes: Value| {
        let reviews = reviews.clone();
        async move {
            let review = obj(json!({
                "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "metadata": {}, "spec": {"resourceAttributes": attributes},
            }));
            let answer = reviews
                .create(&PostParams::default(), &review)
                .await
                .unwrap();
            answer.data["status"]["allowed"].as_bool().unwrap()
        }
    };
    server.deny("patch", "selenosis.io", "browsers/status");
    server.deny_in("team-a", "create", "", "pods");
    let status = |ns: &str| json!({"verb": "patch", "group": "selenosis.io", "resource": "browsers", "subresource": "status", "namespace": ns});
    assert!(!allowed(status("team-a")).await);
    assert!(!allowed(status("team-b")).await);
    assert!(allowed(json!({"verb": "patch", "group": "selenosis.io", "resource": "browsers", "namespace": "team-a"})).await);
    let pods =
        |ns: &str| json!({"verb": "create", "group": "", "resource": "pods", "namespace": ns});
    assert!(!allowed(pods("team-a")).await);
    assert!(allowed(pods("team-b")).await);
    assert!(!allowed(json!({"verb": "create", "group": "", "resource": "pods"})).await);
}

#[tokio::test]
async fn many_objects_and_concurrent_watchers() {
    let (_server, client, browsers) = setup().await;
    let all = Api::<DynamicObject>::all_with(client, &browser_resource(Layout::Default));
    let watchers: Vec<_> = (0..30)
        .map(|_| {
            let all = all.clone();
            tokio::spawn(async move {
                let mut seen = std::collections::HashSet::new();
                let mut s = watcher(all, watcher::Config::default())
                    .default_backoff()
                    .applied_objects()
                    .boxed();
                while seen.len() < 200 {
                    let o = s.next().await.unwrap().unwrap();
                    seen.insert(o.metadata.name.unwrap());
                }
                seen.len()
            })
        })
        .collect();
    let creates: Vec<_> = (0..200)
        .map(|i| {
            let browsers = browsers.clone();
            tokio::spawn(async move {
                browsers
                    .patch(
                        &format!("b{i}"),
                        &apply("ctl"),
                        &Patch::Apply(browser(&format!("b{i}"))),
                    )
                    .await
                    .unwrap();
            })
        })
        .collect();
    for c in creates {
        c.await.unwrap();
    }
    for w in watchers {
        let n = tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 200);
    }
}

#[tokio::test]
async fn kubelet_runs_pods_and_confirms_their_deletion() {
    let (_server, client, _) = setup().await;
    let kubelet = Kubelet::start(client.clone(), "node-1", Script::Run);
    kubelet.set("stuck", Script::Unschedulable);
    let pods = pods(&client);
    pods.patch(
        "web",
        &apply("browser-controller"),
        &Patch::Apply(pod("web")),
    )
    .await
    .unwrap();
    pods.patch(
        "stuck",
        &apply("browser-controller"),
        &Patch::Apply(pod("stuck")),
    )
    .await
    .unwrap();

    let running = eventually(async || {
        let p = pods.get("web").await.ok()?;
        (p.data["status"]["phase"] == "Running").then_some(p)
    })
    .await;
    assert_eq!(running.data["spec"]["nodeName"], "node-1");
    assert!(
        running.data["status"]["podIP"]
            .as_str()
            .unwrap()
            .starts_with("10.")
    );
    let states: Vec<_> = running.data["status"]["containerStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].clone(),
                c["state"].get("running").is_some(),
                c["ready"].clone(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            (json!("browser"), true, json!(true)),
            (json!("seleniferous"), true, json!(true))
        ]
    );

    let unschedulable = eventually(async || {
        let p = pods.get("stuck").await.ok()?;
        p.data["status"]["conditions"][0]["reason"]
            .is_string()
            .then_some(p)
    })
    .await;
    assert_eq!(
        unschedulable.data["status"]["conditions"][0]["reason"],
        "Unschedulable"
    );
    assert!(unschedulable.data["spec"].get("nodeName").is_none());

    pods.delete("web", &DeleteParams::default()).await.unwrap();
    eventually(async || pods.get("web").await.is_err().then_some(())).await;
}

#[tokio::test]
async fn kubelet_failure_scripts_reach_their_end_states() {
    let (_server, client, _) = setup().await;
    let kubelet = Kubelet::start(client.clone(), "node-1", Script::Run);
    kubelet.set("pull", Script::ErrImagePull);
    kubelet.set("oom", Script::OomKilled);
    kubelet.set("evicted", Script::Evicted);
    kubelet.set(
        "exits",
        Script::ExitAfterRunning {
            container: "seleniferous".into(),
            exit_code: 0,
            after: Duration::from_millis(20),
        },
    );
    kubelet.set("waits", Script::StayPending);
    kubelet.set("crash", Script::CrashLoopBackOff);
    kubelet.set("early", Script::TerminatedWhilePending { exit_code: 2 });
    kubelet.set("done", Script::Succeed);
    kubelet.set("keep", Script::Run);
    kubelet.set_deletion("keep", support::kubelet::Deletion::Never);
    let pods = pods(&client);
    for name in [
        "pull", "oom", "evicted", "exits", "waits", "crash", "early", "done", "keep",
    ] {
        pods.patch(name, &apply("browser-controller"), &Patch::Apply(pod(name)))
            .await
            .unwrap();
    }
    let status_of = async |name: &str, check: &dyn Fn(&Value) -> bool| {
        eventually(async || {
            let p = pods.get(name).await.ok()?;
            check(&p.data["status"]).then_some(p.data["status"].clone())
        })
        .await
    };
    let pull = status_of("pull", &|s| {
        s["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"
    })
    .await;
    assert_eq!(pull["phase"], "Pending");
    let oom = status_of("oom", &|s| s["phase"] == "Failed").await;
    assert_eq!(
        oom["containerStatuses"][0]["state"]["terminated"]["reason"],
        "OOMKilled"
    );
    let evicted = status_of("evicted", &|s| s["phase"] == "Failed").await;
    assert_eq!(evicted["reason"], "Evicted");
    let exits = status_of("exits", &|s| {
        s["containerStatuses"][1]["state"]
            .get("terminated")
            .is_some()
    })
    .await;
    assert_eq!(exits["phase"], "Running");
    assert_eq!(
        exits["containerStatuses"][1]["state"]["terminated"]["exitCode"],
        0
    );

    let crash = status_of("crash", &|s| {
        s["containerStatuses"][0]["state"].get("waiting").is_some()
    })
    .await;
    assert_eq!(
        crash["containerStatuses"][0]["state"]["waiting"]["reason"],
        "CrashLoopBackOff"
    );
    assert_eq!(crash["containerStatuses"][0]["restartCount"], 1);
    let early = status_of("early", &|s| {
        s["containerStatuses"][0]["state"]
            .get("terminated")
            .is_some()
    })
    .await;
    assert_eq!(early["phase"], "Pending");
    assert_eq!(
        early["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        2
    );
    let waits = status_of("waits", &|s| s["containerStatuses"].is_array()).await;
    assert_eq!(
        waits["containerStatuses"][0]["state"]["waiting"]["reason"],
        "ContainerCreating"
    );
    let done = status_of("done", &|s| s["phase"] == "Succeeded").await;
    assert_eq!(
        done["containerStatuses"][1]["state"]["terminated"]["reason"],
        "Completed"
    );

    status_of("keep", &|s| s["phase"] == "Running").await;
    pods.delete("keep", &DeleteParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stuck = pods.get("keep").await.unwrap();
    assert!(
        stuck.metadata.deletion_timestamp.is_some(),
        "Deletion::Never leaves the pod terminating"
    );
}

#[tokio::test]
async fn serves_over_tcp_for_other_processes() {
    let (server, _client, _) = setup().await;
    let handle = server.serve().await.unwrap();
    assert!(handle.addr().ip().is_loopback());
    let dir = std::env::temp_dir().join(format!("apiserver-double-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("kubeconfig");
    handle.write_kubeconfig(&path).unwrap();

    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let client = Client::try_from(config).unwrap();
    let remote = Api::<DynamicObject>::namespaced_with(
        client,
        "default",
        &browser_resource(Layout::Default),
    );
    create(&remote, browser("tcp")).await;
    assert!(server.get("browsers", "default", "tcp").is_some());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn event_recorder_publishes_and_folds_repeats() {
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::events::v1::Event as K8sEvent;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};

    let (_server, client, browsers) = setup().await;
    let b = create(&browsers, browser("r")).await;
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "browser-controller".into(),
            instance: None,
        },
    );
    let reference = ObjectReference {
        api_version: Some("selenosis.io/v1".into()),
        kind: Some("Browser".into()),
        name: b.metadata.name.clone(),
        namespace: b.metadata.namespace.clone(),
        uid: b.metadata.uid.clone(),
        ..ObjectReference::default()
    };
    let event = Event {
        type_: EventType::Normal,
        reason: "PodCreated".into(),
        note: Some("pod r created".into()),
        action: "Create".into(),
        secondary: None,
    };
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();
    let events: Api<K8sEvent> = Api::namespaced(client, "default");
    let list = events.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].reason.as_deref(), Some("PodCreated"));
    assert_eq!(list.items[0].series.as_ref().map(|s| s.count), Some(2));
}

async fn get_doc(client: &Client, path: &str) -> Result<Value, kube::Error> {
    let request = http::Request::get(path)
        .header("Accept", "application/json")
        .body(Vec::new())
        .unwrap();
    client.request::<Value>(request).await
}

#[tokio::test]
async fn openapi_v3_and_v2_serve_the_pod_schema_in_the_real_shapes() {
    let (server, client, _) = setup().await;
    assert!(get_doc(&client, "/openapi/v3").await.is_err());
    server.serve_openapi(true, true);
    let discovery = get_doc(&client, "/openapi/v3").await.unwrap();
    let url = discovery["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(url.starts_with("/openapi/v3/api/v1?hash="), "{url}");
    let v3 = get_doc(&client, &url).await.unwrap();
    let schemas = &v3["components"]["schemas"];
    let pod = &schemas["io.k8s.api.core.v1.Pod"];
    // A reference with a description is wrapped in allOf, as kube-openapi does.
    assert_eq!(
        pod["properties"]["spec"]["allOf"],
        json!([{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}])
    );
    assert!(pod["properties"]["spec"]["description"].is_string());
    let container = &schemas["io.k8s.api.core.v1.Container"]["properties"];
    assert_eq!(container["restartPolicy"]["type"], "string");
    assert!(schemas["io.k8s.api.core.v1.ResourceRequirements"]["properties"]["claims"].is_object());
    assert_eq!(
        schemas["io.k8s.apimachinery.pkg.api.resource.Quantity"]["x-kubernetes-int-or-string"],
        true
    );

    let v2 = get_doc(&client, "/openapi/v2").await.unwrap();
    assert_eq!(
        v2["definitions"]["io.k8s.api.core.v1.Pod"]["properties"]["spec"]["$ref"],
        "#/definitions/io.k8s.api.core.v1.PodSpec"
    );

    // An older cluster: the field is gone from both documents, and the v3 URL changes.
    server.remove_schema_field("io.k8s.api.core.v1.Container", "restartPolicy");
    let discovery = get_doc(&client, "/openapi/v3").await.unwrap();
    let newer = discovery["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap();
    assert_ne!(newer, url);
    let v3 = get_doc(&client, newer).await.unwrap();
    assert!(
        v3["components"]["schemas"]["io.k8s.api.core.v1.Container"]["properties"]
            .get("restartPolicy")
            .is_none()
    );
    let v2 = get_doc(&client, "/openapi/v2").await.unwrap();
    assert!(
        v2["definitions"]["io.k8s.api.core.v1.Container"]["properties"]
            .get("restartPolicy")
            .is_none()
    );

    // Only v2, as on a cluster without OpenAPI v3.
    server.serve_openapi(false, true);
    let missing = get_doc(&client, "/openapi/v3").await.unwrap_err();
    assert!(matches!(missing, kube::Error::Api(s) if s.code == 404));
    assert!(get_doc(&client, "/openapi/v2").await.is_ok());
}

#[tokio::test]
async fn apply_of_a_pod_with_fields_the_schema_lacks_fails_only_when_checked() {
    let (server, client, _) = setup().await;
    let pods = pods(&client);
    let mut with_unknown = pod("p1").build();
    with_unknown["spec"]["initContainers"] =
        json!([{"name": "sidecar", "image": "busybox", "restartPolicy": "Always"}]);
    with_unknown["spec"]["containers"][0]["resources"] =
        json!({"limits": {"cpu": "1"}, "claims": [{"name": "gpu"}]});
    server.remove_schema_field("io.k8s.api.core.v1.Container", "restartPolicy");
    server.remove_schema_field("io.k8s.api.core.v1.ResourceRequirements", "claims");

    // Unchecked (the default): accepted.
    let dry = apply("test").dry_run();
    pods.patch("p1", &dry, &Patch::Apply(&with_unknown))
        .await
        .unwrap();

    server.check_pod_fields(500);
    for params in [apply("test").dry_run(), apply("test")] {
        let status = api_error(
            pods.patch("p1", &params, &Patch::Apply(&with_unknown))
                .await,
        );
        assert_eq!(status.code, 500);
        assert_eq!(status.reason, "InternalError");
        assert_eq!(
            status.message,
            "failed to create typed patch object (/v1, Kind=Pod): errors:\n  .spec.containers[name=\"browser\"].resources.claims: field not declared in schema\n  .spec.initContainers[name=\"sidecar\"].restartPolicy: field not declared in schema"
        );
    }
    assert!(server.get("pods", "default", "p1").is_none());

    // Newer servers answer 400; one unknown field is reported on one line.
    server.check_pod_fields(400);
    with_unknown["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "1"}});
    let status = api_error(
        pods.patch("p1", &apply("test"), &Patch::Apply(&with_unknown))
            .await,
    );
    assert_eq!(status.code, 400);
    assert_eq!(
        status.message,
        "failed to create typed patch object (/v1, Kind=Pod): .spec.initContainers[name=\"sidecar\"].restartPolicy: field not declared in schema"
    );

    // Without the unknown fields the same pod is created.
    with_unknown["spec"]["initContainers"][0]
        .as_object_mut()
        .unwrap()
        .remove("restartPolicy");
    pods.patch("p1", &apply("test"), &Patch::Apply(&with_unknown))
        .await
        .unwrap();
    assert!(server.get("pods", "default", "p1").is_some());
}

/// A raw GET through the in-process router with an `Accept` header: (status, content type,
/// body).
async fn raw_get(server: &ApiServer, path: &str, accept: &str) -> (u16, String, Value) {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let request = http::Request::get(path)
        .header(http::header::ACCEPT, accept)
        .body(axum::body::Body::empty())
        .unwrap();
    let response = server.router().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        content_type,
        serde_json::from_slice(&bytes).unwrap(),
    )
}

const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

#[tokio::test]
async fn custom_resources_are_printed_as_tables_with_their_printer_columns() {
    let server = ApiServer::new();
    let mut crd = browser_crd();
    crd["spec"]["versions"][0]["additionalPrinterColumns"] = json!([
        {"name": "Browser", "type": "string", "jsonPath": ".spec.browserName"},
        {"name": "Reason", "type": "string", "jsonPath": ".status.reason", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]);
    server.install_crd(&crd).unwrap();
    let client = server.client();
    let browsers = Api::namespaced_with(client, "default", &browser_resource(Layout::Default));
    create(&browsers, browser("b1")).await;

    let path = "/apis/selenosis.io/v1/namespaces/default/browsers";
    let (status, content_type, table) = raw_get(&server, path, TABLE_ACCEPT).await;
    assert_eq!(status, 200);
    assert_eq!(content_type, "application/json;as=Table;v=v1;g=meta.k8s.io");
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
    let columns: Vec<(&str, i64)> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["priority"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        columns,
        [("Name", 0), ("Browser", 0), ("Reason", 1), ("Age", 0)]
    );
    let row = &table["rows"][0];
    // No status yet: a null cell; the age of an object created just now.
    let cells = row["cells"].as_array().unwrap();
    assert_eq!(cells[..3], [json!("b1"), json!("chrome"), Value::Null]);
    assert!(["0s", "1s"].contains(&cells[3].as_str().unwrap()), "{row}");
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(row["object"]["metadata"]["name"], "b1");

    let (_, _, one) = raw_get(
        &server,
        &format!("{path}/b1?includeObject=Object"),
        TABLE_ACCEPT,
    )
    .await;
    assert_eq!(one["rows"].as_array().unwrap().len(), 1);
    assert_eq!(one["rows"][0]["object"]["spec"]["browserName"], "chrome");
    // Without the Table media type the object itself comes back.
    let (_, content_type, plain) =
        raw_get(&server, &format!("{path}/b1"), "application/json").await;
    assert_eq!(content_type, "application/json");
    assert_eq!(plain["kind"], "Browser");
}

#[tokio::test]
async fn core_events_are_a_field_selectable_view_of_events_k8s_io() {
    let server = ApiServer::new();
    let client = server.client();
    let events: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("events.k8s.io", "v1", "Event"),
            "events",
        ),
    );
    for (name, regarding) in [("e1", "b1"), ("e2", "b2")] {
        create(
            &events,
            json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": name},
                "eventTime": "2026-01-01T00:00:00.000000Z",
                "reportingController": "browser-controller",
                "reportingInstance": "browser-controller-0",
                "action": "CreatePod", "reason": "PodCreated", "type": "Normal",
                "note": format!("created pod {regarding}"),
                "regarding": {"apiVersion": "selenosis.io/v1", "kind": "Browser", "namespace": "default", "name": regarding, "uid": format!("uid-{regarding}")},
            }),
        )
        .await;
    }
    let core: Api<DynamicObject> = Api::namespaced_with(
        client,
        "default",
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Event"), "events"),
    );
    // What `kubectl describe` asks for.
    let selector = "involvedObject.name=b1,involvedObject.namespace=default,involvedObject.kind=Browser,involvedObject.uid=uid-b1";
    let list = core
        .list(&ListParams::default().fields(selector))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    let event = serde_json::to_value(&list.items[0]).unwrap();
    assert_eq!(event["apiVersion"], "v1");
    assert_eq!(event["involvedObject"]["name"], "b1");
    assert_eq!(event["message"], "created pod b1");
    assert_eq!(event["reportingComponent"], "browser-controller");
    assert_eq!(event["reason"], "PodCreated");
    assert_eq!(event["eventTime"], "2026-01-01T00:00:00.000000Z");
    assert_eq!(
        core.get("e2").await.unwrap().data["message"],
        "created pod b2"
    );
    // A view: writes go to events.k8s.io/v1.
    let err = api_error(
        core.create(
            &PostParams::default(),
            &obj(json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e3"}})),
        )
        .await,
    );
    assert_eq!(err.code, 405);
}

#[tokio::test]
async fn aggregated_discovery_says_so_in_its_content_type() {
    let server = ApiServer::new();
    let accept =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    for path in ["/api", "/apis"] {
        let (status, content_type, doc) = raw_get(&server, path, accept).await;
        assert_eq!(status, 200);
        assert_eq!(
            content_type,
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        );
        assert_eq!(doc["kind"], "APIGroupDiscoveryList");
    }
    let (_, content_type, doc) = raw_get(&server, "/apis", "application/json").await;
    assert_eq!(content_type, "application/json");
    assert_eq!(doc["kind"], "APIGroupList");
}

#[tokio::test]
async fn a_pod_deletion_cost_that_is_not_an_int32_is_invalid() {
    let server = ApiServer::new();
    let pods = pods(&server.client());
    let bad =
        pod("costly").annotations(json!({"controller.kubernetes.io/pod-deletion-cost": "cheap"}));
    let err = api_error(pods.create(&PostParams::default(), &obj(bad)).await);
    assert_eq!(err.code, 422);
    assert_eq!(
        err.message,
        "Pod \"costly\" is invalid: metadata.annotations[controller.kubernetes.io/pod-deletion-cost]: Invalid value: \"cheap\": must be a 32bit integer"
    );
    let fine =
        pod("cheap").annotations(json!({"controller.kubernetes.io/pod-deletion-cost": "-5"}));
    create(&pods, fine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespaced_kubelet_leaves_other_namespaces_alone() {
    let (server, client, _) = setup().await;
    let namespaces: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "Namespace"),
            "namespaces",
        ),
    );
    create(
        &namespaces,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mine"}}),
    )
    .await;
    let _kubelet = support::kubelet::Kubelet::start_with(
        client.clone(),
        "node-mine",
        Script::Run,
        support::kubelet::KubeletConfig {
            namespace: Some("mine".into()),
            ..Default::default()
        },
    );
    let mine: Api<DynamicObject> = Api::namespaced_with(client.clone(), "mine", &pod_resource());
    for api in [&mine, &pods(&client)] {
        api.patch("p", &apply("browser-controller"), &Patch::Apply(pod("p")))
            .await
            .unwrap();
    }
    eventually(async || {
        let p = mine.get("p").await.ok()?;
        (p.data["status"]["phase"] == "Running").then_some(())
    })
    .await;
    let other = server.get("pods", "default", "p").unwrap();
    assert!(other["spec"]["nodeName"].is_null(), "{other}");
    assert!(other["status"]["phase"] != "Running", "{other}");
}

#[tokio::test]
async fn list_items_of_built_in_kinds_carry_no_type_but_custom_resources_do() {
    let (server, client, browsers) = setup().await;
    create(&browsers, browser("b1")).await;
    create(&pods(&client), pod("p1")).await;
    let (_, _, pods) = raw_get(
        &server,
        "/api/v1/namespaces/default/pods",
        "application/json",
    )
    .await;
    assert_eq!(pods["kind"], "PodList");
    assert!(pods["items"][0].get("kind").is_none(), "{pods}");
    assert!(pods["items"][0].get("apiVersion").is_none(), "{pods}");
    let (_, _, list) = raw_get(
        &server,
        "/apis/selenosis.io/v1/namespaces/default/browsers",
        "application/json",
    )
    .await;
    assert_eq!(list["items"][0]["kind"], "Browser");
    assert_eq!(list["items"][0]["apiVersion"], "selenosis.io/v1");
}

/// An object of `kind` in group `rbac.authorization.k8s.io`.
fn rbac_object(kind: &str, name: &str, ns: Option<&str>, rest: Value) -> DynamicObject {
    let mut object = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
        "metadata": {"name": name},
    });
    if let Some(ns) = ns {
        object["metadata"]["namespace"] = json!(ns);
    }
    for (key, value) in rest.as_object().unwrap() {
        object[key] = value.clone();
    }
    serde_json::from_value(object).unwrap()
}

fn rbac_api(client: &Client, plural: &str, kind: &str, ns: Option<&str>) -> Api<DynamicObject> {
    let ar = kube::core::ApiResource {
        group: "rbac.authorization.k8s.io".into(),
        version: "v1".into(),
        api_version: "rbac.authorization.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// A client of `server` over TCP acting as `system:serviceaccount:ops:robot`, with what keeps
/// it working (the served server, the kubeconfig's folder).
async fn robot_client(
    server: &ApiServer,
) -> (
    support::apiserver::ServeHandle,
    support::host::TempDir,
    Client,
) {
    let served = server.serve().await.unwrap();
    let dir = support::host::TempDir::new("double-robot");
    let kubeconfig = dir.join("kubeconfig");
    served
        .write_kubeconfig_as(&kubeconfig, Some("system:serviceaccount:ops:robot"))
        .unwrap();
    let robot = support::controlplane::client_from(&kubeconfig)
        .await
        .unwrap();
    (served, dir, robot)
}

#[tokio::test]
async fn impersonated_requests_get_what_rbac_grants_and_reviews_say_so() {
    let server = ApiServer::new();
    let (_served, _dir, robot) = robot_client(&server).await;
    let admin = server.client();

    let everywhere: Api<DynamicObject> = Api::all_with(robot.clone(), &pod_resource());
    let denied = everywhere.list(&ListParams::default()).await.unwrap_err();
    match denied {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 403);
            assert_eq!(
                status.message,
                "pods is forbidden: User \"system:serviceaccount:ops:robot\" cannot list resource \"pods\" in API group \"\" at the cluster scope"
            );
        }
        other => panic!("{other:?}"),
    }

    // A Role in `default` bound to the ServiceAccount: pods there, nothing elsewhere.
    let role = rbac_object(
        "Role",
        "pod-reader",
        Some("default"),
        json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}),
    );
    rbac_api(&admin, "roles", "Role", Some("default"))
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding = rbac_object(
        "RoleBinding",
        "pod-reader",
        Some("default"),
        json!({
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "ops"}],
        }),
    );
    rbac_api(&admin, "rolebindings", "RoleBinding", Some("default"))
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let in_default: Api<DynamicObject> =
        Api::namespaced_with(robot.clone(), "default", &pod_resource());
    in_default.list(&ListParams::default()).await.unwrap();
    assert!(everywhere.list(&ListParams::default()).await.is_err());
    assert!(
        in_default
            .delete("x", &DeleteParams::default())
            .await
            .is_err_and(|e| matches!(e, kube::Error::Api(s) if s.code == 403))
    );

    // Its own reviews answer the same.
    let reviews: Api<k8s_openapi::api::authorization::v1::SelfSubjectAccessReview> =
        Api::all(robot.clone());
    let review = |verb: &str, ns: Option<&str>| {
        serde_json::from_value::<k8s_openapi::api::authorization::v1::SelfSubjectAccessReview>(json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": verb, "group": "", "resource": "pods", "namespace": ns}},
        }))
        .unwrap()
    };
    for (verb, ns, allowed) in [
        ("list", Some("default"), true),
        ("delete", Some("default"), false),
        ("list", None, false),
    ] {
        let answer = reviews
            .create(&PostParams::default(), &review(verb, ns))
            .await
            .unwrap();
        assert_eq!(answer.status.unwrap().allowed, allowed, "{verb} {ns:?}");
    }
    // The admin is not impersonated: not subject to RBAC.
    pods(&admin).list(&ListParams::default()).await.unwrap();
}

/// As kube-apiserver does: an apply that creates is authorized as a patch and as a create; an
/// apply of an existing object, or of a missing object's status, needs no create.
#[tokio::test]
async fn an_apply_that_creates_needs_create_as_well_as_patch() {
    let server = ApiServer::new();
    let (_served, _dir, robot) = robot_client(&server).await;
    let admin = server.client();
    let grant = |verbs: Value| {
        rbac_object(
            "Role",
            "pod-writer",
            Some("default"),
            json!({"rules": [{"apiGroups": [""], "resources": ["pods", "pods/status"], "verbs": verbs}]}),
        )
    };
    let roles = rbac_api(&admin, "roles", "Role", Some("default"));
    roles
        .create(&PostParams::default(), &grant(json!(["patch"])))
        .await
        .unwrap();
    rbac_api(&admin, "rolebindings", "RoleBinding", Some("default"))
        .create(
            &PostParams::default(),
            &rbac_object(
                "RoleBinding",
                "pod-writer",
                Some("default"),
                json!({
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-writer"},
                    "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "ops"}],
                }),
            ),
        )
        .await
        .unwrap();
    let pod = pod("p");
    let apply = PatchParams::apply("robot");
    let by_robot: Api<DynamicObject> =
        Api::namespaced_with(robot.clone(), "default", &pod_resource());
    match by_robot.patch("p", &apply, &Patch::Apply(&pod)).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403);
            assert!(
                status.message.contains("cannot create resource \"pods\""),
                "{}",
                status.message
            );
        }
        other => panic!("{other:?}"),
    }
    // A missing object's status: not found, whatever the grants.
    match by_robot
        .patch_status("p", &apply, &Patch::Apply(&pod))
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 404, "{}", status.message),
        other => panic!("{other:?}"),
    }
    roles
        .replace(
            "pod-writer",
            &PostParams::default(),
            &grant(json!(["patch", "create"])),
        )
        .await
        .unwrap();
    by_robot
        .patch("p", &apply, &Patch::Apply(&pod))
        .await
        .unwrap();
    // Patching what exists needs patch only.
    roles
        .replace(
            "pod-writer",
            &PostParams::default(),
            &grant(json!(["patch"])),
        )
        .await
        .unwrap();
    by_robot
        .patch("p", &apply, &Patch::Apply(&pod))
        .await
        .unwrap();
}

#[tokio::test]
async fn an_updated_crd_serves_its_new_printer_columns() {
    let server = ApiServer::new();
    let client = server.client();
    let mut crd = browser_crd();
    server.install_crd(&crd).unwrap();
    crd["spec"]["versions"][0]["additionalPrinterColumns"] =
        json!([{"name": "Shown", "type": "string", "jsonPath": ".spec.browserName"}]);
    let gvk =
        kube::core::GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition");
    let (resource, _) = discovery::pinned_kind(&client, &gvk).await.unwrap();
    let crds: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let name = crd["metadata"]["name"].as_str().unwrap().to_string();
    crds.patch(
        &name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap();
    let path = format!(
        "/apis/{}/v1/namespaces/default/browsers",
        crd["spec"]["group"].as_str().unwrap()
    );
    let (status, _, table) = raw_get(&server, &path, TABLE_ACCEPT).await;
    assert_eq!(status, 200);
    let names: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Name", "Shown"]);
}
