//! Building Pod status the way a kubelet reports it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The pod and host IP of every pod on the process kubelet's node (host network).
pub const POD_IP: &str = "127.0.0.1";

pub(crate) fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

pub(crate) fn waiting(reason: &str, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.to_owned()),
            message,
        }),
        ..Default::default()
    }
}

pub(crate) fn running(started_at: Time) -> ContainerState {
    ContainerState {
        running: Some(ContainerStateRunning {
            started_at: Some(started_at),
        }),
        ..Default::default()
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn terminated(
    exit_code: i32,
    reason: &str,
    message: Option<String>,
    started_at: Option<Time>,
    finished_at: Time,
    container_id: Option<String>,
) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code,
            reason: Some(reason.to_owned()),
            message,
            started_at,
            finished_at: Some(finished_at),
            container_id,
            signal: None,
        }),
        ..Default::default()
    }
}

/// A container status before the container first starts.
pub(crate) fn initial_status(name: &str, image: &str, reason: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.to_owned(),
        image: image.to_owned(),
        image_id: String::new(),
        ready: false,
        restart_count: 0,
        started: Some(false),
        state: Some(waiting(reason, None)),
        ..Default::default()
    }
}

pub(crate) fn is_terminated(s: &ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.terminated.is_some())
}

pub(crate) fn is_running(s: &ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.running.is_some())
}

pub(crate) fn exit_code(s: &ContainerStatus) -> Option<i32> {
    s.state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .map(|t| t.exit_code)
}

/// Pod conditions with stable transition times.
#[derive(Debug, Default)]
pub(crate) struct Conditions {
    current: BTreeMap<&'static str, PodCondition>,
}

impl Conditions {
    pub fn set(
        &mut self,
        type_: &'static str,
        ok: bool,
        reason: Option<&str>,
        message: Option<String>,
    ) {
        let status = if ok { "True" } else { "False" };
        let transition = match self.current.get(type_) {
            Some(c) if c.status == status => c.last_transition_time.clone(),
            _ => Some(now()),
        };
        self.current.insert(
            type_,
            PodCondition {
                type_: type_.to_owned(),
                status: status.to_owned(),
                reason: reason.map(str::to_owned),
                message,
                last_transition_time: transition,
                last_probe_time: None,
                observed_generation: None,
            },
        );
    }

    pub fn to_vec(&self) -> Vec<PodCondition> {
        self.current.values().cloned().collect()
    }
}

/// The host/pod IP fields of a pod status: the node's address, and the pod's own.
pub(crate) fn with_ips(mut status: PodStatus, pod_ip: &str) -> PodStatus {
    status.host_ip = Some(POD_IP.to_owned());
    status.host_ips = Some(vec![k8s_openapi::api::core::v1::HostIP {
        ip: POD_IP.to_owned(),
    }]);
    status.pod_ip = Some(pod_ip.to_owned());
    status.pod_ips = Some(vec![PodIP {
        ip: pod_ip.to_owned(),
    }]);
    status
}
