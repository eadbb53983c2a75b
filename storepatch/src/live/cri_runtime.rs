//! What the CRI runtimes (containerd, CRI-O) share behind [`crate::contract::Runtime`]: `verify --live` asks
//! them over the CRI, exactly as the kubelet does.

use crate::contract::LiveContainer;
use crate::StoreError;

/// Every container the CRI runtime at `endpoint` lists, with its status.
#[cfg(feature = "live")]
pub fn cri_live_containers(endpoint: &str) -> Result<Vec<LiveContainer>, StoreError> {
    use crate::live::cri::CriClient;
    use crate::{HASH_ANNOTATION, HASH_WITHOUT_RESOURCES_ANNOTATION};
    let live = |e: String| StoreError::Live(format!("cannot ask the runtime at {endpoint}: {e}"));
    let client = CriClient::connect(endpoint).map_err(|e| live(e.to_string()))?;
    let all = client.list_containers().map_err(|e| live(e.to_string()))?;
    Ok(all
        .into_iter()
        .map(|c| LiveContainer {
            hash: c.annotations.get(HASH_ANNOTATION).cloned(),
            hash_without_resources: c
                .annotations
                .get(HASH_WITHOUT_RESOURCES_ANNOTATION)
                .cloned(),
            running: c.state == "CONTAINER_RUNNING",
            pid: c.pid.filter(|p| *p != 0),
            id: c.id,
        })
        .collect())
}

/// Without the `live` feature there is no CRI client: say so instead of checking nothing.
#[cfg(not(feature = "live"))]
pub fn cri_live_containers(endpoint: &str) -> Result<Vec<LiveContainer>, StoreError> {
    Err(StoreError::Live(format!(
        "cannot ask the runtime at {endpoint}: this build has no CRI client (storepatch feature `live`)"
    )))
}
