//! The pod network of the test environment (`testenv::podnet`): each pod gets its own network
//! namespace and address, written to its status; Deployments' pods become Ready by their
//! readiness probes and fill their Service's EndpointSlice; the API server reaches pods through
//! their Service's endpoints; pods reach the API server at `KUBERNETES_SERVICE_HOST`/`PORT`; a
//! `hostNetwork` pod keeps the host's address; and a pod has no route off the pod network.
//!
//! Needs root (namespaces, veth pairs, a bridge), `ip` and the test binaries (`make testbin`).
#![allow(clippy::unwrap_used)]

mod kubelet_common;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::ListParams;
use kubelet_common::{create, phase, shared, wait_log, wait_pod};
use serde_json::json;

fn pod_ip(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default()
}

fn subnet_prefix() -> String {
    let gateway = shared().env.pod_gateway().unwrap().to_string();
    format!("{}.", gateway.strip_suffix(".1").unwrap())
}

/// A pod asks the API server for its version through `KUBERNETES_SERVICE_HOST`/`PORT` with its
/// service-account token, from its own address on the pod network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_has_its_own_address_and_reaches_the_api_server() {
    let sh = shared();
    let ns = sh.env.namespace("podnet-api").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(sh.env.client().await.unwrap(), &ns);
    create(
        &pods,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "api"},
               "spec": {"restartPolicy": "Never", "containers": [{
                   "name": "main", "image": sh.fixture, "args": ["api-version"]}]}}),
    )
    .await;
    let pod = wait_pod(&pods, "api", Duration::from_secs(60), |p| {
        matches!(phase(p), "Succeeded" | "Failed")
    })
    .await;
    let log = sh.kubelet.logs(&ns, "api", "main");
    assert_eq!(phase(&pod), "Succeeded", "{log}");
    assert!(log.contains("API server v1."), "{log}");
    let ip = pod_ip(&pod);
    assert!(ip.starts_with(&subnet_prefix()), "pod IP {ip}");
}

/// A pod's only route is its subnet: nothing it sends can leave the machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_has_no_route_off_the_pod_network() {
    let sh = shared();
    let ns = sh.env.namespace("podnet-routes").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(sh.env.client().await.unwrap(), &ns);
    create(
        &pods,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "routes"},
               "spec": {"restartPolicy": "Never", "containers": [{
                   "name": "main", "image": sh.fixture,
                   "args": ["probe", "--read", "/proc/net/route"]}]}}),
    )
    .await;
    wait_pod(&pods, "routes", Duration::from_secs(60), |p| {
        phase(p) == "Succeeded"
    })
    .await;
    let log = sh.kubelet.logs(&ns, "routes", "main");
    let probe: serde_json::Value = serde_json::from_str(&log).expect("probe JSON");
    let table = probe["files"]["/proc/net/route"]
        .as_str()
        .expect("the route table");
    // Iface Destination Gateway ... Mask (hex, little-endian).
    let routes: Vec<Vec<&str>> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(routes.len(), 1, "{table}");
    assert_eq!(routes[0][0], "eth0");
    assert_ne!(routes[0][1], "00000000", "no default route: {table}");
    assert_eq!(routes[0][7], "00FFFFFF", "a /24: {table}");
}

/// A `hostNetwork` pod shares the host's network namespace and address, and reaches the API
/// server on loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_network_pod_keeps_the_host_address() {
    let sh = shared();
    let ns = sh.env.namespace("podnet-host").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(sh.env.client().await.unwrap(), &ns);
    create(
        &pods,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "host"},
               "spec": {"restartPolicy": "Never", "hostNetwork": true, "containers": [{
                   "name": "main", "image": sh.fixture, "args": ["api-version"]}]}}),
    )
    .await;
    let pod = wait_pod(&pods, "host", Duration::from_secs(60), |p| {
        matches!(phase(p), "Succeeded" | "Failed")
    })
    .await;
    assert_eq!(
        phase(&pod),
        "Succeeded",
        "{}",
        sh.kubelet.logs(&ns, "host", "main")
    );
    assert_eq!(pod_ip(&pod), "127.0.0.1");
}

/// A Deployment's pods become Ready once their readiness probe answers, fill the Service's
/// EndpointSlice with their addresses, and the API server reaches them through the Service
/// (its proxy dials an endpoint, as webhook calls do with `--enable-aggregator-routing`). A
/// probe on a port nothing listens on keeps a pod unready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_fill_endpoints_and_the_api_server_reaches_them() {
    let sh = shared();
    let ns = sh.env.namespace("podnet-svc").await.unwrap();
    let client = sh.env.client().await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let deployment = |name: &str, probe_port: u16| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
               "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}},
                                     "spec": {"containers": [{
                                         "name": "web", "image": sh.fixture,
                                         "args": ["serve-http", "--port", "8080", "--body", "hello"],
                                         "ports": [{"name": "http", "containerPort": 8080}],
                                         "readinessProbe": {"httpGet": {"path": "/", "port": probe_port},
                                                            "periodSeconds": 1}}]}}}})
    };
    create(&deployments, deployment("web", 8080)).await;
    create(&deployments, deployment("unready", 8081)).await;
    create(
        &services,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"selector": {"app": "web"},
                        "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}),
    )
    .await;

    // Two ready endpoints, at the pods' own addresses.
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    let deadline = Instant::now() + Duration::from_secs(90);
    let addresses = loop {
        let list = slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
            .await
            .unwrap();
        let ready: Vec<String> = list
            .items
            .iter()
            .flat_map(|s| s.endpoints.iter().flatten())
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
            .flat_map(|e| e.addresses.clone())
            .collect();
        if ready.len() == 2 {
            break ready;
        }
        assert!(Instant::now() < deadline, "endpoints: {:#?}", list.items);
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let web_pods = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    let mut pod_ips: Vec<String> = web_pods.items.iter().map(pod_ip).collect();
    pod_ips.sort();
    let mut addresses = addresses;
    addresses.sort();
    assert_eq!(addresses, pod_ips);
    for ip in &pod_ips {
        assert!(ip.starts_with(&subnet_prefix()), "pod IP {ip}");
    }

    // The API server reaches them through the Service.
    let request = http::Request::get(format!("/api/v1/namespaces/{ns}/services/web:http/proxy/"))
        .body(Vec::new())
        .unwrap();
    let text = client.request_text(request).await.unwrap();
    assert!(text.starts_with("hello web-"), "{text}");

    // The pods whose probe never answers run, but are not Ready.
    let unready = pods
        .list(&ListParams::default().labels("app=unready"))
        .await
        .unwrap();
    assert_eq!(unready.items.len(), 2);
    for p in &unready.items {
        let name = p.metadata.name.clone().unwrap();
        wait_log(&ns, &name, "web", "serving HTTP", Duration::from_secs(30)).await;
        let p = pods.get(&name).await.unwrap();
        let cs = &p
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[0];
        assert!(cs.state.as_ref().unwrap().running.is_some());
        assert!(!cs.ready, "{name} is Ready without its probe passing");
    }
}

/// Connects to `to` from inside the network namespace at `netns`, on a thread of its own (a
/// thread's network namespace is its own), giving up after `timeout`.
fn connect_from(netns: &std::path::Path, to: std::net::SocketAddr, timeout: Duration) -> bool {
    let netns = netns.to_path_buf();
    std::thread::spawn(move || {
        let ns = std::fs::File::open(&netns).unwrap();
        nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        std::net::TcpStream::connect_timeout(&to, timeout).is_ok()
    })
    .join()
    .unwrap()
}

/// The MAC address of a host-side interface.
fn mac(interface: &str) -> String {
    std::fs::read_to_string(format!("/sys/class/net/{interface}/address"))
        .unwrap()
        .trim()
        .to_string()
}

/// A pod keeps reaching the gateway when another pod goes. A bridge left to pick its own MAC
/// takes its lowest port's and changes it when that port leaves; the pod that cached the old
/// one then loses the gateway until its ARP entry expires (API requests time out).
#[test]
fn the_gateway_keeps_its_address_when_a_pod_goes() {
    let network = testenv::podnet::PodNetwork::create().unwrap();
    let gateway = network.gateway();
    let index = gateway.octets()[2];
    let bridge = format!("captfbr{index}");
    let listener = std::net::TcpListener::bind((gateway, 0)).unwrap();
    let to = listener.local_addr().unwrap();
    let bridge_mac = mac(&bridge);

    let a = network.attach().unwrap();
    let b = network.attach().unwrap();
    let veth = |p: &testenv::podnet::PodNet| format!("captf{index}v{}", p.ip.octets()[3]);
    // The pod that stays caches the gateway's address; the other one goes. Without a fixed
    // address the bridge would carry the lower of the two veth addresses: the one that goes is
    // the one whose address that is.
    let (stays, goes) = if mac(&veth(&a)) < mac(&veth(&b)) {
        (b, a)
    } else {
        (a, b)
    };
    assert!(connect_from(&stays.path, to, Duration::from_secs(5)));
    network.detach(&goes);
    assert_eq!(mac(&bridge), bridge_mac, "the bridge's address changed");
    assert!(
        connect_from(&stays.path, to, Duration::from_secs(5)),
        "the pod lost the gateway when another pod went"
    );
    network.detach(&stays);
}
