//! Odd and hostile input on a real API server: a Browser name too long for a label value, a
//! write refused for a reason no rule knows, a BrowserConfig the client cannot decode beside
//! a healthy one across an operator restart, and a namespace that enforces the restricted
//! Pod Security Standard.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use browser_controller::api::keys;
use browser_controller::names;

use crate::support::host;
use crate::support::kinds::config_resource;
use crate::{Ctx, Kind, poll, resource};

/// A name of the maximum length of a custom resource (253), far over a label value's 63.
fn long_name() -> String {
    let name = format!("chrome-139-0-{}", "0123456789abcdef".repeat(16));
    name[..253].trim_end_matches('-').to_string()
}

pub(crate) async fn a_browser_named_longer_than_a_label_value_runs_and_is_cleaned_up(cx: Arc<Ctx>) {
    let name = long_name();
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser(&name, json!({})).await;
    let running = cx.seen_running(&name).await;
    let label = names::label_value_for(&name);
    assert_eq!(label.len(), 63);
    assert_eq!(
        running["metadata"]["labels"][keys::LABEL_BROWSER],
        label.as_str()
    );
    let pod = cx.seen("Pod", &name).pop().expect("its pod was seen");
    assert_eq!(
        pod["metadata"]["labels"][keys::LABEL_BROWSER],
        label.as_str()
    );
    assert_eq!(
        pod["spec"]["hostname"].as_str(),
        names::hostname_for(&name).as_deref()
    );
    assert_eq!(running["status"]["podIP"], pod["status"]["podIP"]);
    cx.delete_browser(&name).await;
    cx.until_gone(&name).await;
    assert_eq!(cx.pod_uids(&name).len(), 1);
}

/// The API server answers the pod create with 413 Request Entity Too Large, which no rule of
/// the operator knows: three tries, then `Failed` with reason `WriteRejected` naming the
/// answer, then the Browser is deleted. The double injects the answer; a real server from
/// 1.30 gives it through a ValidatingAdmissionPolicy whose reason is RequestEntityTooLarge.
pub(crate) async fn a_create_refused_as_too_large_fails_after_three_tries_not_forever(
    cx: Arc<Ctx>,
) {
    const MESSAGE: &str = "the browser pod is larger than this cluster accepts";
    let policy_name = format!("{}-too-large", cx.ns);
    match cx.be.kind {
        Kind::Double => {
            let (server, _) = cx.be.double.as_ref().expect("the double");
            server.inject(
                crate::Fault::new("create", "pods", 413, "RequestEntityTooLarge", MESSAGE)
                    .object(&cx.ns, "big"),
            );
        }
        _ => {
            if !refuse_as_too_large(&cx, &policy_name, MESSAGE).await {
                println!(
                    "    {}: the server has no admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (before 1.30): 413 not produced, scenario skipped",
                    cx.ns
                );
                return;
            }
        }
    }
    cx.start_operator(&[]);
    cx.chrome_config().await;
    cx.create_browser("big", json!({})).await;
    let message = cx.fails_without_a_pod("big", "WriteRejected").await;
    assert!(
        message.starts_with(
            "the API server refused to create pod 3 times: 413 RequestEntityTooLarge: "
        ),
        "{message}"
    );
    assert!(message.contains(MESSAGE), "{message}");
    if cx.be.kind != Kind::Double {
        remove_policy(&cx, &policy_name).await;
    }
}

/// Installs a ValidatingAdmissionPolicy (and its binding) that refuses the creation of the
/// pod `big` in this namespace with 413; `false` when the server has none. Waits until the
/// server enforces it.
async fn refuse_as_too_large(cx: &Ctx, name: &str, message: &str) -> bool {
    let policies = cx.be.api_all(&resource(
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
    ));
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
            "validations": [{
                "expression": "object.metadata.name != 'big'",
                "message": message,
                "reason": "RequestEntityTooLarge",
            }],
        },
    });
    let applied = policies
        .patch(name, &PatchParams::apply("e2e"), &Patch::Apply(&policy))
        .await;
    if let Err(kube::Error::Api(status)) = &applied
        && status.code == 404
    {
        return false;
    }
    applied.expect("policy created");
    let bindings = cx.be.api_all(&resource(
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    ));
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": cx.ns}}},
        },
    });
    bindings
        .patch(name, &PatchParams::apply("e2e"), &Patch::Apply(&binding))
        .await
        .expect("binding created");
    // The server enforces a policy once its informers have it: probe with dry runs.
    let pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "big", "namespace": cx.ns},
        "spec": {"containers": [{"name": "c", "image": cx.be.image}]},
    }))
    .expect("pod");
    poll(
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async {
            match cx
                .pods()
                .create(
                    &PostParams {
                        dry_run: true,
                        ..PostParams::default()
                    },
                    &pod,
                )
                .await
            {
                Err(kube::Error::Api(status)) if status.code == 413 => Ok(()),
                other => Err(format!("the policy is not enforced yet: {other:?}")),
            }
        },
    )
    .await;
    true
}

async fn remove_policy(cx: &Ctx, name: &str) {
    for (kind, plural) in [
        (
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
        ),
        ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
    ] {
        let api = cx
            .be
            .api_all(&resource("admissionregistration.k8s.io", kind, plural));
        api.delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("{kind} {name} deleted: {e}"));
    }
}

/// A BrowserConfig whose `affinity` nests `depth` objects.
fn deep_config(cx: &Ctx, name: &str, depth: usize) -> String {
    let ar = config_resource(cx.layout);
    let mut nested = "{}".to_string();
    for _ in 0..depth {
        nested = format!("{{\"x\":{nested}}}");
    }
    format!(
        r#"{{"apiVersion":"{}","kind":"BrowserConfig","metadata":{{"name":"{name}","namespace":"{}"}},"spec":{{"template":{{"affinity":{nested}}},"browsers":{{"firefox":{{"120.0":{{"image":"{}"}}}}}}}}}}"#,
        ar.api_version, cx.ns, cx.be.image
    )
}

/// One BrowserConfig nested too deeply for the client to decode never stops the operator: it
/// is reported (condition, Event or log) and skipped, while the healthy config beside it
/// serves Browsers before and after an operator restart, and the restarted operator becomes
/// ready. A server that cannot store such an object (1.24 times out) leaves only the healthy
/// half to check, and says so.
pub(crate) async fn a_browserconfig_too_deep_to_decode_is_skipped_and_others_keep_serving(
    cx: Arc<Ctx>,
) {
    let probe = host::free_port();
    let health = format!("--health-probe-bind-address=127.0.0.1:{probe}");
    cx.start_operator(&[&health]);
    cx.chrome_config().await;
    let path = format!(
        "/apis/{}/namespaces/{}/browserconfigs",
        config_resource(cx.layout).api_version,
        cx.ns
    );
    let body = deep_config(&cx, "deep", 125);
    // kube-apiserver 1.24 does not answer such a create for minutes.
    let stored = tokio::time::timeout(
        Duration::from_secs(15),
        cx.be.request("POST", &path, Some(body)),
    )
    .await
    .unwrap_or_else(|_| Err("no answer within 15 s".to_string()));
    match &stored {
        Ok(_) => {}
        Err(e) => println!(
            "    {}: the server did not store a BrowserConfig nested 125 deep ({e}); only the healthy config is checked",
            cx.ns
        ),
    }
    cx.create_browser("before", json!({})).await;
    cx.seen_running("before").await;
    if stored.is_ok() {
        // Reported on the object itself: its status says it was skipped.
        poll(crate::WAIT, Duration::from_millis(200), || async {
            let text = cx.be.request("GET", &format!("{path}/deep"), None).await?;
            let reported =
                text.contains("\"reason\":\"Undecodable\"") && text.contains("\"type\":\"Valid\"");
            reported.then_some(()).ok_or_else(|| {
                format!(
                    "no Undecodable condition yet: {}",
                    &text[..text.len().min(300)]
                )
            })
        })
        .await;
    }
    cx.kill_operator();
    cx.start_operator(&[&health]);
    poll(crate::WAIT, Duration::from_millis(100), || async {
        match host::http_get(probe, "/readyz") {
            Some((200, _)) => Ok(()),
            other => Err(format!("the restarted operator is not ready: {other:?}")),
        }
    })
    .await;
    cx.create_browser("after", json!({})).await;
    cx.seen_running("after").await;
    for name in ["before", "after"] {
        cx.delete_browser(name).await;
        cx.until_gone(name).await;
    }
    if stored.is_ok() {
        cx.be
            .request("DELETE", &format!("{path}/deep"), None)
            .await
            .expect("the deep config deleted");
    }
}

/// In a namespace that enforces the restricted Pod Security Standard, the default level
/// (baseline) gets a clear failure from admission; `--pod-security-level=restricted` renders
/// pods that pass, and the Browser runs.
pub(crate) async fn restricted_namespace_runs_browsers_with_the_restricted_level(cx: Arc<Ctx>) {
    let namespaces = cx.be.api_all(&resource("", "Namespace", "namespaces"));
    let labels = json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }}});
    namespaces
        .patch(&cx.ns, &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .expect("namespace labelled");
    cx.chrome_config().await;
    // The double has no Pod Security admission: there, only the restricted pods are checked.
    if cx.be.kind != Kind::Double {
        cx.start_operator(&[]);
        cx.create_browser("baseline", json!({})).await;
        let message = cx.fails_without_a_pod("baseline", "Forbidden").await;
        assert!(
            message.contains("violates PodSecurity \"restricted"),
            "{message}"
        );
        cx.kill_operator();
    }
    cx.start_operator(&["--pod-security-level=restricted"]);
    cx.create_browser("strict", json!({})).await;
    cx.seen_running("strict").await;
    let pod = cx.seen("Pod", "strict").pop().expect("its pod was seen");
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["spec"]["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    for container in pod["spec"]["containers"].as_array().expect("containers") {
        let security = &container["securityContext"];
        assert_eq!(security["allowPrivilegeEscalation"], false, "{container}");
        assert_eq!(
            security["capabilities"]["drop"],
            json!(["ALL"]),
            "{container}"
        );
    }
    cx.delete_browser("strict").await;
    cx.until_gone("strict").await;
}
