//! The cluster's Pod schema, read from its OpenAPI documents: `/openapi/v3` (discovery,
//! then the `api/v1` document it points to), else `/openapi/v2`. Fetched once at start-up
//! and again on demand when the cluster rejects a pod for a field it does not declare
//! (at most once per interval). Without a schema, pods are applied unpruned.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use serde_json::Value;
use tokio::sync::{Mutex, watch};
use tracing::{info, warn};

use crate::link::error::describe;
use crate::pod::schema::{PodSchema, SchemaError};

/// How long one attempt to read the schema may take (the v2 document is megabytes).
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// Why no Pod schema could be read.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("GET {path}: {}", describe(.source))]
    Request {
        path: String,
        #[source]
        source: kube::Error,
    },
    #[error("{path}: not an OpenAPI document with schemas: {source}")]
    Json {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: {source}")]
    Schema {
        path: String,
        #[source]
        source: SchemaError,
    },
    #[error("/openapi/v3 does not list api/v1")]
    NoCoreGroup,
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("OpenAPI v3: {v3}; OpenAPI v2: {v2}")]
    Unavailable {
        v3: Box<FetchError>,
        v2: Box<FetchError>,
    },
}

/// The part of an OpenAPI v3 document the Pod schema comes from. Parsing into it skips
/// everything else (`paths`, most of the document) without building it, which keeps the
/// start-up peak of memory down.
#[derive(serde::Deserialize)]
struct V3Document {
    components: V3Components,
}

#[derive(serde::Deserialize)]
struct V3Components {
    schemas: serde_json::Map<String, Value>,
}

/// The part of an OpenAPI v2 document the Pod schema comes from (see [`V3Document`]).
#[derive(serde::Deserialize)]
struct V2Document {
    definitions: serde_json::Map<String, Value>,
}

async fn get_json<T: serde::de::DeserializeOwned>(
    client: &Client,
    path: &str,
) -> Result<T, FetchError> {
    let request = http::Request::get(path)
        .header(http::header::ACCEPT, "application/json")
        .body(Vec::new())
        .map_err(|e| FetchError::Request {
            path: path.to_string(),
            source: kube::Error::HttpError(e),
        })?;
    let text = client
        .request_text(request)
        .await
        .map_err(|source| FetchError::Request {
            path: path.to_string(),
            source,
        })?;
    serde_json::from_str(&text).map_err(|source| FetchError::Json {
        path: path.to_string(),
        source,
    })
}

async fn fetch_v3(client: &Client) -> Result<PodSchema, FetchError> {
    let discovery: Value = get_json(client, "/openapi/v3").await?;
    let path = discovery
        .pointer("/paths/api~1v1/serverRelativeURL")
        .and_then(Value::as_str)
        .ok_or(FetchError::NoCoreGroup)?
        .to_string();
    let doc: V3Document = get_json(client, &path).await?;
    PodSchema::from_v3_schemas(&doc.components.schemas)
        .map_err(|source| FetchError::Schema { path, source })
}

async fn fetch_v2(client: &Client) -> Result<PodSchema, FetchError> {
    let path = "/openapi/v2";
    let doc: V2Document = get_json(client, path).await?;
    PodSchema::from_v2_definitions(&doc.definitions).map_err(|source| FetchError::Schema {
        path: path.to_string(),
        source,
    })
}

/// Reads the Pod schema the cluster serves: OpenAPI v3, else v2 (clusters before 1.27
/// may not serve v3).
pub async fn fetch_pod_schema(client: &Client) -> Result<PodSchema, FetchError> {
    let attempt = async {
        match fetch_v3(client).await {
            Ok(schema) => Ok(schema),
            Err(v3) => fetch_v2(client)
                .await
                .map_err(|v2| FetchError::Unavailable {
                    v3: Box::new(v3),
                    v2: Box::new(v2),
                }),
        }
    };
    tokio::time::timeout(FETCH_TIMEOUT, attempt)
        .await
        .unwrap_or(Err(FetchError::Timeout(FETCH_TIMEOUT)))
}

/// The Pod schema in use, shared by every controller; subscribers learn when it changes.
pub struct PodSchemas {
    client: Client,
    min_refetch: Duration,
    current: watch::Sender<Option<Arc<PodSchema>>>,
    /// When the last on-demand refetch started; the lock also keeps refetches one at a time.
    last_refetch: Mutex<Option<Instant>>,
}

impl PodSchemas {
    /// No schema yet; on-demand refetches at most once per `min_refetch`.
    pub fn new(client: Client, min_refetch: Duration) -> Self {
        Self {
            client,
            min_refetch,
            current: watch::Sender::new(None),
            last_refetch: Mutex::new(None),
        }
    }

    /// The schema pods are pruned with, if the cluster served one.
    pub fn current(&self) -> Option<Arc<PodSchema>> {
        self.current.borrow().clone()
    }

    /// Tells of every change of the schema in use.
    pub fn subscribe(&self) -> watch::Receiver<Option<Arc<PodSchema>>> {
        self.current.subscribe()
    }

    /// Fetches the schema now (start-up). A failure is logged and leaves pods unpruned:
    /// the operator works on without it.
    pub async fn load(&self) {
        match fetch_pod_schema(&self.client).await {
            Ok(schema) => {
                info!("read the cluster's Pod schema");
                self.replace(schema);
            }
            Err(error) => {
                warn!(%error, "cannot read the cluster's Pod schema; pods are applied without removing fields the cluster may not know");
            }
        }
    }

    fn replace(&self, schema: PodSchema) -> bool {
        self.current.send_if_modified(|current| {
            if current.as_deref() == Some(&schema) {
                return false;
            }
            *current = Some(Arc::new(schema));
            true
        })
    }

    /// After the cluster rejected a pod pruned with `used` for a field it does not declare:
    /// refetches the schema unless that was done within the interval, and tells whether the
    /// schema in use now differs from `used`, i.e. whether sending the pod again, pruned
    /// anew, can succeed.
    pub async fn renewed_since(&self, used: Option<&PodSchema>) -> bool {
        let mut last = self.last_refetch.lock().await;
        if last.is_none_or(|at| at.elapsed() >= self.min_refetch) {
            *last = Some(Instant::now());
            match fetch_pod_schema(&self.client).await {
                Ok(schema) => {
                    if self.replace(schema) {
                        info!("the cluster's Pod schema changed; pods are pruned to the new one");
                    }
                }
                Err(error) => warn!(%error, "cannot refetch the cluster's Pod schema"),
            }
        }
        self.current().as_deref() != used
    }
}
