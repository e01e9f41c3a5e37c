//! HTTP layer: path and verb parsing, fault injection, request records, and the dispatch to
//! the store. One fallback handler parses paths itself, because resource paths depend on the
//! CRDs installed at run time.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, Request, State as AxumState};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::ApiError;
use super::rbac::{self, User};
use super::resources;
use super::resources::Special;
use super::selector::{FieldSelector, LabelSelector};
use super::store::{DeleteOpts, PatchType, State, StreamingLists, Target, WriteOpts};
use super::table;
use super::watch::{self, WatchParams, WatchStream};
use super::{RequestRecord, Shared, lock};

const MAX_BODY: usize = 16 << 20;
/// The apiserver's default watch timeout lies between 30 and 60 minutes.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

pub fn router(shared: Shared) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

/// Content type of aggregated discovery documents; clients decode by it.
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
/// Content type of server-side printed Tables.
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

enum Outcome {
    Reply(u16, Value),
    /// A reply whose content type is not plain `application/json`.
    Typed(u16, Value, &'static str),
    Watch(Box<WatchStream>),
}

impl From<ApiError> for Outcome {
    fn from(e: ApiError) -> Self {
        Outcome::Reply(e.code, e.to_status())
    }
}

fn json_response(code: u16, body: &Value) -> Response {
    typed_response(code, body, "application/json")
}

fn typed_response(code: u16, body: &Value, content_type: &'static str) -> Response {
    let mut response = Response::new(Body::from(serde_json::to_vec(body).unwrap_or_default()));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

async fn handle(AxumState(shared): AxumState<Shared>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(e) => {
            return json_response(400, &ApiError::bad_request(e.to_string()).to_status());
        }
    };
    let query = Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let request = Incoming {
        method: &parts.method,
        path: parts.uri.path(),
        query: &query,
        headers: &parts.headers,
        body: &bytes,
    };
    let outcome = {
        let mut state = lock(&shared);
        request.serve(&mut state)
    };
    match outcome {
        Outcome::Reply(code, body) => json_response(code, &body),
        Outcome::Typed(code, body, content_type) => typed_response(code, &body, content_type),
        Outcome::Watch(ws) => {
            let mut response = Response::new(watch::body(shared, *ws));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
            response
        }
    }
}

enum Route<'a> {
    Version,
    Readyz,
    OpenApiV3,
    OpenApiV3Core,
    OpenApiV2,
    CoreVersions,
    Groups,
    Group(&'a str),
    Resources(&'a str, &'a str),
    Resource(ResourcePath<'a>),
}

struct ResourcePath<'a> {
    group: &'a str,
    version: &'a str,
    ns: Option<&'a str>,
    plural: &'a str,
    name: Option<&'a str>,
    sub: Option<&'a str>,
}

fn resource_path<'a>(group: &'a str, version: &'a str, rest: &[&'a str]) -> Option<Route<'a>> {
    let path = |ns, plural, name, sub| {
        Some(Route::Resource(ResourcePath {
            group,
            version,
            ns,
            plural,
            name,
            sub,
        }))
    };
    match rest {
        // `namespaces/NAME/status` is the namespace's subresource, not a resource in it.
        ["namespaces", name, sub @ ("status" | "finalize")] if group.is_empty() => {
            path(None, "namespaces", Some(*name), Some(*sub))
        }
        ["namespaces", ns, plural] => path(Some(*ns), plural, None, None),
        ["namespaces", ns, plural, name] => path(Some(*ns), plural, Some(*name), None),
        ["namespaces", ns, plural, name, sub] => path(Some(*ns), plural, Some(*name), Some(*sub)),
        [plural] => path(None, plural, None, None),
        [plural, name] => path(None, plural, Some(*name), None),
        [plural, name, sub] => path(None, plural, Some(*name), Some(*sub)),
        _ => None,
    }
}

fn parse_path(path: &str) -> Option<Route<'_>> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["version"] => Some(Route::Version),
        ["readyz"] => Some(Route::Readyz),
        ["openapi", "v3"] => Some(Route::OpenApiV3),
        ["openapi", "v3", "api", "v1"] => Some(Route::OpenApiV3Core),
        ["openapi", "v2"] => Some(Route::OpenApiV2),
        ["api"] => Some(Route::CoreVersions),
        ["apis"] => Some(Route::Groups),
        ["apis", group] => Some(Route::Group(group)),
        ["api", version] => Some(Route::Resources("", version)),
        ["apis", group, version] => Some(Route::Resources(group, version)),
        ["api", version, rest @ ..] => resource_path("", version, rest),
        ["apis", group, version, rest @ ..] => resource_path(group, version, rest),
        _ => None,
    }
}

struct Incoming<'a> {
    method: &'a Method,
    path: &'a str,
    query: &'a [(String, String)],
    headers: &'a HeaderMap,
    body: &'a [u8],
}

/// A request after routing, with what the record and fault matching need.
struct Call {
    verb: &'static str,
    target: Target,
    name: Option<String>,
    patch_type: Option<PatchType>,
}

impl Incoming<'_> {
    fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, key: &str) -> bool {
        self.param(key) == Some("true")
    }

    fn record(&self, state: &mut State, call: Option<&Call>, code: u16) {
        let field_manager = self.param("fieldManager").map(str::to_string);
        let dry_run = if self.method == Method::DELETE {
            self.delete_opts().is_ok_and(|o| o.dry_run)
        } else {
            self.param("dryRun") == Some("All")
        };
        let user = self
            .headers
            .get("impersonate-user")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let streamed_list = self.flag("sendInitialEvents");
        state.requests.push(match call {
            Some(c) => RequestRecord {
                user,
                verb: c.verb.to_string(),
                group: c.target.def.group.clone(),
                resource: c.target.def.plural.clone(),
                subresource: c.target.sub.clone(),
                namespace: (!c.target.ns.is_empty()).then(|| c.target.ns.clone()),
                name: c.name.clone(),
                field_manager,
                dry_run,
                patch_type: c.patch_type.map(|p| p.as_str().to_string()),
                status: code,
                path: self.path.to_string(),
                streamed_list,
            },
            None => RequestRecord {
                user,
                verb: "discovery".to_string(),
                group: String::new(),
                resource: String::new(),
                subresource: None,
                namespace: None,
                name: None,
                field_manager,
                dry_run,
                patch_type: None,
                status: code,
                path: self.path.to_string(),
                streamed_list,
            },
        });
    }

    fn serve(&self, state: &mut State) -> Outcome {
        if state.unavailable {
            self.record(state, None, 503);
            return ApiError::new(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            )
            .into();
        }
        let Some(route) = parse_path(self.path) else {
            self.record(state, None, 404);
            return ApiError::no_route().into();
        };
        let aggregated = self
            .headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("as=APIGroupDiscoveryList"));
        let doc = match route {
            Route::Readyz if state.starting => {
                self.record(state, None, 500);
                return ApiError::new(500, "InternalError", "readyz check failed").into();
            }
            Route::Readyz => Some(json!("ok")),
            Route::Version => Some(resources::version_info(&state.git_version)),
            Route::OpenApiV3 => state.openapi.v3_discovery(),
            Route::OpenApiV3Core => state.openapi.v3_core(),
            Route::OpenApiV2 => state.openapi.v2(),
            Route::CoreVersions if aggregated => Some(resources::aggregated(&state.defs, true)),
            Route::CoreVersions => Some(resources::core_versions()),
            Route::Groups if aggregated => Some(resources::aggregated(&state.defs, false)),
            Route::Groups => Some(resources::group_list(&state.defs)),
            Route::Group(g) => resources::group(&state.defs, g),
            Route::Resources(g, v) => resources::resource_list(&state.defs, g, v),
            Route::Resource(rp) => return self.serve_resource(state, &rp),
        };
        match doc {
            Some(doc) if self.method == Method::GET => {
                self.record(state, None, 200);
                if doc["kind"] == "APIGroupDiscoveryList" {
                    return Outcome::Typed(200, doc, AGGREGATED);
                }
                Outcome::Reply(200, doc)
            }
            Some(_) => {
                self.record(state, None, 405);
                ApiError::method_not_allowed(
                    "the server does not allow this method on the requested resource",
                )
                .into()
            }
            None => {
                self.record(state, None, 404);
                ApiError::no_route().into()
            }
        }
    }

    fn call(&self, state: &State, rp: &ResourcePath) -> Result<Call, ApiError> {
        let def = state
            .def(rp.group, rp.version, rp.plural)
            .ok_or_else(ApiError::no_route)?;
        // A namespaced object needs a namespace; a cluster-scoped one must not have one.
        if (def.namespaced && rp.ns.is_none() && rp.name.is_some())
            || (!def.namespaced && rp.ns.is_some())
        {
            return Err(ApiError::no_route());
        }
        match rp.sub {
            None => {}
            Some("status") if def.has_status(rp.version) => {}
            Some("binding") if def.special == resources::Special::Pod => {}
            Some(_) => return Err(ApiError::no_route()),
        }
        let named = rp.name.is_some();
        let (verb, patch_type) = match (self.method.as_str(), named, rp.sub) {
            ("GET", true, _) => ("get", None),
            ("GET", false, _) if self.flag("watch") => ("watch", None),
            ("GET", false, _) => ("list", None),
            ("POST", false, _) | ("POST", true, Some("binding")) => ("create", None),
            ("PUT", true, _) => ("update", None),
            ("PATCH", true, _) => {
                let ct = self
                    .headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                let pt = PatchType::from_content_type(ct).ok_or_else(|| {
                    ApiError::new(
                        415,
                        "UnsupportedMediaType",
                        format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, got {ct}"),
                    )
                })?;
                ("patch", Some(pt))
            }
            ("DELETE", true, None) => ("delete", None),
            ("DELETE", false, None) => ("deletecollection", None),
            _ => {
                return Err(ApiError::method_not_allowed(
                    "the server does not allow this method on the requested resource",
                ));
            }
        };
        // Across all namespaces a namespaced resource can only be listed and watched.
        let everywhere = def.namespaced && rp.ns.is_none();
        if !def.verbs().contains(&verb) || (everywhere && !matches!(verb, "list" | "watch")) {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
        Ok(Call {
            verb,
            target: Target {
                ns: rp.ns.unwrap_or("").to_string(),
                def,
                version: rp.version.to_string(),
                sub: rp.sub.map(str::to_string),
            },
            name: rp.name.map(str::to_string),
            patch_type,
        })
    }

    fn serve_resource(&self, state: &mut State, rp: &ResourcePath) -> Outcome {
        let call = match self.call(state, rp) {
            Ok(c) => c,
            Err(e) => {
                self.record(state, None, e.code);
                return e.into();
            }
        };
        if let Err(e) = self.authorize(state, &call) {
            self.record(state, Some(&call), e.code);
            return e.into();
        }
        let outcome = match self.fault(state, &call) {
            Some(e) => e.into(),
            None => match self.execute(state, &call) {
                Ok(o) => o,
                Err(e) => e.into(),
            },
        };
        let code = match &outcome {
            Outcome::Reply(code, _) | Outcome::Typed(code, _, _) => *code,
            Outcome::Watch(_) => 200,
        };
        self.record(state, Some(&call), code);
        outcome
    }

    /// The first matching injected fault, consumed.
    fn fault(&self, state: &mut State, call: &Call) -> Option<ApiError> {
        let t = &call.target;
        let creates = call.verb == "create" || applies_create(state, call);
        let key = t.def.key();
        let idx = state.faults.iter().position(|f| {
            state.resolve(&f.resource).is_some_and(|d| d.key() == key)
                && (f.verb == call.verb || (f.verb == "create" && creates))
                && f.subresource == t.sub
                && f.namespace.as_ref().is_none_or(|ns| *ns == t.ns)
                && f.name
                    .as_ref()
                    .is_none_or(|n| Some(n) == call.name.as_ref())
                && f.times != Some(0)
        })?;
        let fault = &mut state.faults[idx];
        if let Some(n) = fault.times.as_mut() {
            *n -= 1;
        }
        let err = ApiError::new(fault.status, &fault.reason, fault.message.clone()).with_details(
            serde_json::json!({
                "name": call.name.clone().unwrap_or_default(),
                "group": t.def.group,
                "kind": t.def.plural,
            }),
        );
        if fault.times == Some(0) {
            state.faults.remove(idx);
        }
        Some(err)
    }

    fn body_json(&self, verb_apply: bool) -> Result<Value, ApiError> {
        if self.body.is_empty() {
            return Ok(Value::Null);
        }
        // A real API server stores objects nested deeper than serde_json's default limit.
        let mut decoder = serde_json::Deserializer::from_slice(self.body);
        decoder.disable_recursion_limit();
        let parsed = Value::deserialize(&mut decoder).and_then(|v| decoder.end().map(|()| v));
        match parsed {
            Ok(v) => Ok(v),
            // Apply bodies are YAML (kube sends JSON, which is YAML too).
            Err(e) if verb_apply => std::str::from_utf8(self.body)
                .ok()
                .and_then(|s| serde_saphyr::from_str::<Value>(s).ok())
                .ok_or_else(|| ApiError::bad_request(e.to_string())),
            Err(e) => Err(ApiError::bad_request(e.to_string())),
        }
    }

    /// Cuts a list to the page `limit` and `continue` ask for, as a list from storage is cut.
    /// (A list that may come from the watch cache, `resourceVersion=0`, is whole, as a real
    /// API server serves it.) The continue token is the offset of the next item; pages are
    /// not a snapshot of one resourceVersion.
    fn page(&self, list: &mut Value) -> Result<(), ApiError> {
        let Some(limit) = self.param("limit").and_then(|l| l.parse::<usize>().ok()) else {
            return Ok(());
        };
        if limit == 0 || self.param("resourceVersion") == Some("0") {
            return Ok(());
        }
        let offset = match self.param("continue").filter(|c| !c.is_empty()) {
            Some(token) => token
                .parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid continue token {token:?}")))?,
            None => 0,
        };
        let Some(items) = list["items"].as_array_mut() else {
            return Ok(());
        };
        let total = items.len();
        let end = (offset + limit).min(total);
        *items = items.drain(offset.min(total)..end).collect();
        if end < total {
            list["metadata"]["continue"] = json!(end.to_string());
            list["metadata"]["remainingItemCount"] = json!(total - end);
        }
        Ok(())
    }

    fn selectors(&self, t: &Target) -> Result<(LabelSelector, FieldSelector), ApiError> {
        let labels = LabelSelector::parse(self.param("labelSelector").unwrap_or(""))
            .map_err(ApiError::bad_request)?;
        let fields = FieldSelector::parse(
            self.param("fieldSelector").unwrap_or(""),
            &t.def.plural,
            &t.def.group,
        )
        .map_err(ApiError::bad_request)?;
        Ok((labels, fields))
    }

    fn write_opts(&self) -> WriteOpts {
        WriteOpts {
            manager: self.param("fieldManager").map(str::to_string),
            dry_run: self.param("dryRun") == Some("All"),
            force: self.flag("force"),
            user: self.user(),
        }
    }

    /// The user of `Impersonate-User`; `None` for the admin.
    fn user(&self) -> Option<User> {
        self.headers
            .get("impersonate-user")
            .and_then(|v| v.to_str().ok())
            .map(User::impersonated)
    }

    /// RBAC's verdict for an impersonated user; reviewing one's own access is always allowed.
    fn authorize(&self, state: &State, call: &Call) -> Result<(), ApiError> {
        let Some(user) = self.user() else {
            return Ok(());
        };
        if call.target.def.special == Special::AccessReview {
            return Ok(());
        }
        let resource = match &call.target.sub {
            Some(sub) => format!("{}/{sub}", call.target.def.plural),
            None => call.target.def.plural.clone(),
        };
        let request = rbac::Request {
            verb: call.verb,
            group: &call.target.def.group,
            resource: &resource,
            namespace: &call.target.ns,
        };
        // An apply that creates is authorized as a patch and as a create, as the API server
        // does.
        let create = rbac::Request {
            verb: "create",
            ..request
        };
        let denied = [Some(request), applies_create(state, call).then_some(create)]
            .into_iter()
            .flatten()
            .find(|r| !rbac::allows(state, &user, r));
        match denied {
            None => Ok(()),
            Some(request) => {
                let message = rbac::forbidden_message(&user, &request, call.name.as_deref());
                Err(ApiError::new(403, "Forbidden", message))
            }
        }
    }

    fn delete_opts(&self) -> Result<DeleteOpts, ApiError> {
        let body = self.body_json(false)?;
        let grace = body["gracePeriodSeconds"].as_i64().or_else(|| {
            self.param("gracePeriodSeconds")
                .and_then(|g| g.parse().ok())
        });
        let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
        Ok(DeleteOpts {
            grace,
            uid: text(&body["preconditions"]["uid"]),
            resource_version: text(&body["preconditions"]["resourceVersion"]),
            dry_run: self.param("dryRun") == Some("All")
                || body["dryRun"]
                    .as_array()
                    .is_some_and(|d| d.iter().any(|x| x == "All")),
        })
    }

    fn execute(&self, state: &mut State, call: &Call) -> Result<Outcome, ApiError> {
        let t = &call.target;
        let name = call.name.as_deref().unwrap_or("");
        let reply = |v: Value| Ok(Outcome::Reply(200, v));
        if t.def.special == Special::EventView {
            return self.event_view(state, call).map(|v| Outcome::Reply(200, v));
        }
        match call.verb {
            "get" => self.printed(state, t, vec![state.get(t, name)?], None),
            "list" => {
                let (labels, fields) = self.selectors(t)?;
                let mut list = state.list(t, |o| labels.matches(o) && fields.matches(o));
                let items = list["items"].as_array().cloned().unwrap_or_default();
                if self.table_for(t) {
                    let rv = list["metadata"]["resourceVersion"].as_str().unwrap_or("");
                    return self.printed(state, t, items, Some(rv));
                }
                self.page(&mut list)?;
                reply(list)
            }
            "watch" => {
                if state.streaming_lists == StreamingLists::Refused
                    && self.param("resourceVersionMatch").is_some()
                {
                    return Err(refused_streaming_list());
                }
                let (labels, fields) = self.selectors(t)?;
                let resource_version = match self.param("resourceVersion").filter(|s| !s.is_empty())
                {
                    None => None,
                    Some(rv) => Some(rv.parse::<u64>().map_err(|_| {
                        ApiError::bad_request(format!("invalid resource version: {rv}"))
                    })?),
                };
                let timeout = self
                    .param("timeoutSeconds")
                    .and_then(|s| s.parse().ok())
                    .map(Duration::from_secs)
                    .unwrap_or(DEFAULT_WATCH_TIMEOUT);
                let params = WatchParams {
                    resource_version,
                    labels,
                    fields,
                    timeout,
                    bookmarks: self.flag("allowWatchBookmarks"),
                    send_initial_events: self.flag("sendInitialEvents"),
                };
                Ok(Outcome::Watch(Box::new(
                    state.start_watch(t.clone(), params),
                )))
            }
            "create" => {
                let body = self.body_json(false)?;
                if t.sub.as_deref() == Some("binding") {
                    return Ok(Outcome::Reply(
                        201,
                        state.bind(t, name, &body, &self.write_opts())?,
                    ));
                }
                Ok(Outcome::Reply(
                    201,
                    state.create(t, body, &self.write_opts())?,
                ))
            }
            "update" => {
                reply(state.replace(t, name, self.body_json(false)?, &self.write_opts())?)
            }
            "patch" => {
                let pt = call.patch_type.unwrap_or(PatchType::Merge);
                let opts = self.write_opts();
                // PatchOptions validation comes before the object is looked up.
                if pt == PatchType::Apply && opts.manager.as_deref().is_none_or(str::is_empty) {
                    return Err(patch_options_invalid(
                        "fieldManager",
                        "FieldValueRequired",
                        "Required value: is required for apply patch",
                    ));
                }
                if pt != PatchType::Apply && self.param("force").is_some() {
                    return Err(patch_options_invalid(
                        "force",
                        "FieldValueForbidden",
                        "Forbidden: may not be specified for non-apply patch",
                    ));
                }
                let body = self.body_json(pt == PatchType::Apply)?;
                if pt == PatchType::Apply
                    && t.def.special == resources::Special::Pod
                    && t.sub.is_none()
                {
                    state.openapi.check_apply(&body)?;
                }
                let existed = state.stored(&t.def.key(), &t.ns, name).is_some();
                let obj = state.patch(t, name, pt, body, &opts)?;
                // An apply that creates answers 201 Created.
                let code = if pt == PatchType::Apply && !existed && !opts.dry_run {
                    201
                } else {
                    200
                };
                Ok(Outcome::Reply(code, obj))
            }
            "delete" => reply(state.delete(t, name, &self.delete_opts()?)?),
            "deletecollection" => {
                let (labels, fields) = self.selectors(t)?;
                let opts = self.delete_opts()?;
                reply(state.delete_collection(
                    t,
                    |o| labels.matches(o) && fields.matches(o),
                    &opts,
                )?)
            }
            _ => Err(ApiError::method_not_allowed("unsupported verb")),
        }
    }
}

impl Incoming<'_> {
    /// Whether the response is a Table: asked for, and a custom resource (built-in kinds
    /// have printers of their own in the real server, not reproduced here).
    fn table_for(&self, t: &Target) -> bool {
        t.def.crd
            && t.sub.is_none()
            && self
                .headers
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(table::wants_table)
    }

    /// One object (`rv` is `None`), as a Table when asked for.
    fn printed(
        &self,
        state: &State,
        t: &Target,
        mut items: Vec<Value>,
        rv: Option<&str>,
    ) -> Result<Outcome, ApiError> {
        if !self.table_for(t) {
            return Ok(Outcome::Reply(200, items.pop().unwrap_or_default()));
        }
        let rv = match rv {
            Some(rv) => rv.to_string(),
            None => state.rv.to_string(),
        };
        let table = table::table(
            &items,
            t.def.columns(&t.version),
            &rv,
            self.param("includeObject"),
            jiff::Timestamp::now(),
        );
        Ok(Outcome::Typed(200, table, TABLE))
    }

    /// get and list of core/v1 Events, served from the events.k8s.io/v1 objects; field
    /// selectors apply to the core/v1 form (`involvedObject.name`, ...).
    fn event_view(&self, state: &State, call: &Call) -> Result<Value, ApiError> {
        let t = &call.target;
        let source = state
            .target_for("events.events.k8s.io", &t.ns)
            .ok_or_else(ApiError::no_route)?;
        if call.verb == "get" {
            let name = call.name.as_deref().unwrap_or("");
            return state
                .get(&source, name)
                .map(|e| table::core_event(&e))
                .map_err(|_| ApiError::not_found(&t.def, name));
        }
        let (labels, fields) = self.selectors(t)?;
        let list = state.list(&source, |o| {
            let event = table::core_event(o);
            labels.matches(&event) && fields.matches(&event)
        });
        let items: Vec<Value> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(table::core_event)
            .collect();
        Ok(serde_json::json!({
            "kind": "EventList",
            "apiVersion": "v1",
            "metadata": list["metadata"],
            "items": items,
        }))
    }
}

/// `PatchOptions.meta.k8s.io "" is invalid: ...` (422), from `ValidatePatchOptions`.
fn patch_options_invalid(field: &str, reason: &str, message: &str) -> ApiError {
    ApiError::new(
        422,
        "Invalid",
        format!("PatchOptions.meta.k8s.io \"\" is invalid: {field}: {message}"),
    )
    .with_details(serde_json::json!({
        "group": "meta.k8s.io",
        "kind": "PatchOptions",
        "causes": [{"reason": reason, "message": message, "field": field}],
    }))
}

/// A streaming list refused as Kubernetes 1.24 refuses it, in `ValidateListOptions`:
/// `ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: ...` (422).
fn refused_streaming_list() -> ApiError {
    let message = "Forbidden: resourceVersionMatch is forbidden for watch";
    ApiError::new(
        422,
        "Invalid",
        format!("ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: {message}"),
    )
    .with_details(serde_json::json!({
        "group": "meta.k8s.io",
        "kind": "ListOptions",
        "causes": [{"reason": "FieldValueForbidden", "message": message, "field": "resourceVersionMatch"}],
    }))
}

/// Whether `call` is an apply of an object that does not exist yet: admission and
/// authorization take it for a create. (A subresource creates nothing: its apply of a missing
/// object is answered 404.)
fn applies_create(state: &State, call: &Call) -> bool {
    let t = &call.target;
    call.patch_type == Some(PatchType::Apply)
        && t.sub.is_none()
        && call
            .name
            .as_deref()
            .is_some_and(|n| state.stored(&t.def.key(), &t.ns, n).is_none())
}
