//! A plain-HTTP client for the loopback registry (hyper, already in the tree through kube).

use anyhow::Context as _;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// A response with its whole body.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Fails with the status and (the start of) the body unless the status is one of `ok`.
    pub fn expect(self, what: &str, ok: &[StatusCode]) -> anyhow::Result<Self> {
        if ok.contains(&self.status) {
            return Ok(self);
        }
        let body = String::from_utf8_lossy(&self.body[..self.body.len().min(512)]).into_owned();
        anyhow::bail!("{what}: HTTP {}: {body}", self.status)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct HttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl HttpClient {
    pub fn new() -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> anyhow::Result<Response> {
        let mut req = Request::builder().method(method.clone()).uri(url);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(body))
            .with_context(|| format!("building {method} {url}"))?;
        let resp = self
            .client
            .request(req)
            .await
            .with_context(|| format!("{method} {url}"))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .with_context(|| format!("reading the body of {method} {url}"))?
            .to_bytes();
        Ok(Response {
            status,
            headers,
            body,
        })
    }

    pub async fn get(&self, url: &str, headers: &[(&str, &str)]) -> anyhow::Result<Response> {
        self.send(Method::GET, url, headers, Bytes::new()).await
    }
}
