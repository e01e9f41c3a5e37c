//! Requests of an older epoch of the link are abandoned: when the API server stops answering,
//! and again when it answers again, every request still waiting fails at once instead of
//! waiting on a connection that is dead (its reconcile is retried, and a relist follows the
//! heal). The connection of an abandoned request is closed with it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::watch;
use tower::{Layer, Service};

use super::LinkState;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The error of an abandoned request.
#[derive(Debug, thiserror::Error)]
#[error("request abandoned: the connection to the API server was lost while it waited")]
pub struct Abandoned;

/// Wraps a client's service so that its requests follow the link's epochs.
#[derive(Clone)]
pub struct AbortLayer {
    link: watch::Receiver<LinkState>,
}

impl AbortLayer {
    pub(super) fn new(link: watch::Receiver<LinkState>) -> Self {
        Self { link }
    }
}

impl<S> Layer<S> for AbortLayer {
    type Service = Abort<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Abort {
            inner,
            link: self.link.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Abort<S> {
    inner: S,
    link: watch::Receiver<LinkState>,
}

impl<S, R> Service<R> for Abort<S>
where
    S: Service<R>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let mut link = self.link.clone();
        let epoch = link.borrow_and_update().epoch;
        let response = self.inner.call(request);
        Box::pin(async move {
            let moved_on = async {
                // Without a link (its owner gone) nothing is ever abandoned.
                if link.wait_for(|state| state.epoch != epoch).await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                answer = response => answer.map_err(Into::into),
                () = moved_on => Err(Box::new(Abandoned) as BoxError),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::time::Duration;
    use tower::ServiceExt;

    #[tokio::test]
    async fn a_request_waiting_when_the_epoch_moves_on_is_abandoned() {
        let (tx, rx) = watch::channel(LinkState::default());
        // A server that never answers.
        let silent = tower::service_fn(|_: ()| std::future::pending::<Result<(), Infallible>>());
        let waiting = tokio::spawn(AbortLayer::new(rx.clone()).layer(silent).oneshot(()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        tx.send_modify(|s| {
            s.reachable = false;
            s.epoch += 1;
        });
        let error = waiting.await.unwrap().unwrap_err();
        assert!(error.is::<Abandoned>(), "{error}");
        // A request of the new epoch is answered as usual.
        let answering = tower::service_fn(|n: u32| async move { Ok::<_, Infallible>(n + 1) });
        let answer = AbortLayer::new(rx).layer(answering).oneshot(1).await;
        assert_eq!(answer.unwrap(), 2);
    }
}
