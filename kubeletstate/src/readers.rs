//! How each kubelet version reads each checkpoint file: the layout it decodes into, what its
//! `VerifyChecksum` hashes, and the order of its fallbacks. Each reader cites its source.

use std::sync::OnceLock;

use hashcompat::Node;

use crate::gotype::{crc32_ieee, fnv32a, DecodeError, Layout, Val};

/// The layouts in `data/`, by file stem.
fn layout(name: &str) -> &'static Layout {
    static LAYOUTS: OnceLock<Vec<(&'static str, Layout)>> = OnceLock::new();
    let all = LAYOUTS.get_or_init(|| {
        macro_rules! load {
            ($($n:literal),*) => {
                vec![$(($n, Layout::from_json(include_str!(concat!("../data/", $n, ".json")))
                    .unwrap_or_else(|e| panic!("data/{}.json: {e}", $n)))),*]
            };
        }
        load!(
            "dra-v1-1.30",
            "dra-v1-without-resource-handles",
            "dra-envelope-1.31",
            "status-1.27",
            "status-envelope-1.32",
            "cpu-v1-1.17",
            "cpu-v1-1.18",
            "cpu-v2-1.18",
            "device-1.19",
            "device-1.20",
            "device-v1-1.23",
            "memory-1.21",
            "status-data-1.32",
            "allocation-envelope-1.33",
            "allocation-data-1.33",
            "cpu-v3-1.36",
            "cpu-v4-1.37",
            "cpu-v4-data-1.37",
            "memory-v2-1.36",
            "memory-v3-1.37",
            "memory-v3-data-1.37",
            "allocation-envelope-1.38",
            "allocation-data-1.38"
        )
    });
    &all.iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no layout {name}"))
        .1
}

/// What a checksum covers.
#[derive(Debug, Clone, Copy)]
enum Hashed {
    /// `checksum.New(cp)` with `cp` a pointer to the root struct, its Checksum zeroed.
    PtrToRoot,
    /// `checksum.New(cp.F)`: the value of one root field, with its type prefix.
    Field(&'static str),
}

/// A text rewrite applied to the spew text before hashing (`strings.Replace(s, old, new, n)`,
/// `n` = -1 for all): the kubelet's way of reproducing the type names an older version printed.
type Rename = (&'static str, &'static str, i32);

/// One `GetCheckpoint` attempt.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// FNV-32a over go-spew text.
    Spew {
        layout: &'static str,
        hashed: Hashed,
        renames: &'static [Rename],
        /// `if cp.Checksum == 0 { return nil }` (CPU manager: files of the old file backend).
        zero_accepted: bool,
        /// On a checksum mismatch, v1.30's DRA `verifyChecksumWithoutResourceHandles`.
        dra_without_resource_handles: bool,
        /// Once the checksum matches, the `Data` string is decoded into this layout, and a
        /// failure is reported with this prefix (the pod status and allocation managers).
        then_decode_data: Option<(&'static str, &'static str)>,
    },
    /// CRC-32 of a `Data` string against a `Checksum` field (DRA envelope).
    Crc32Data { layout: &'static str },
    /// The dual-checksum formats of v1.37 (CPU manager V4, memory manager V3): the file decodes
    /// into `layout` (the old format's members plus `data` and `dataChecksum`), `Data` decodes
    /// into `data_layout`, and `checksum.New(Data)` must equal `DataChecksum`. When that fails
    /// and the file has a non-empty `data` or a non-zero `dataChecksum`, the kubelet does not
    /// fall back to the older formats ("could not load v4 checkpoint ... not falling back").
    DataEnvelope {
        layout: &'static str,
        data_layout: &'static str,
        what: &'static str,
    },
    /// A `{version, data, checksum}` envelope (allocation manager, v1.38): `checksum.New(Data)`
    /// must equal `Checksum`, then `Data` decodes into the layout of its `version`; any other
    /// version is refused ("unsupported checkpoint version").
    Versioned {
        layout: &'static str,
        versions: Versions,
        what: &'static str,
    },
}

/// The data layout of each checkpoint `version` a [`Step::Versioned`] reader knows.
type Versions = &'static [(&'static str, &'static str)];

/// A kubelet version's reading code for one file: steps tried in order, the next one only
/// when the previous one fails.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reader {
    pub(crate) source: &'static str,
    steps: &'static [Step],
}

/// What one reader decides.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    Accepted {
        computed: u64,
    },
    Rejected {
        reason: String,
        computed: Option<u64>,
    },
    Undetermined {
        reason: String,
    },
}

impl Reader {
    pub(crate) fn read(&self, node: &Node<'_>) -> Outcome {
        let mut last = None;
        for step in self.steps {
            match step.run(node) {
                accepted @ Outcome::Accepted { .. } => return accepted,
                undetermined @ Outcome::Undetermined { .. } => return undetermined,
                rejected if step.ends_fallback(node) => return rejected,
                rejected => last = Some(rejected),
            }
        }
        last.expect("a reader has at least one step")
    }
}

fn checksum_of(v: &Val, layout: &Layout, field: &str) -> u64 {
    let Val::Struct(fields) = v else {
        unreachable!("roots are structs")
    };
    match fields[layout.field_index(field)] {
        Val::Uint(n) => n,
        _ => unreachable!("checksum fields are unsigned"),
    }
}

fn set_field(v: &mut Val, layout: &Layout, field: &str, value: Val) {
    let Val::Struct(fields) = v else {
        unreachable!("roots are structs")
    };
    fields[layout.field_index(field)] = value;
}

fn hash_text(mut text: String, renames: &[Rename]) -> u64 {
    for &(old, new, n) in renames {
        text = if n < 0 {
            text.replace(old, new)
        } else {
            text.replacen(old, new, n as usize)
        };
    }
    fnv32a(text.as_bytes()) as u64
}

fn decoded(layout: &Layout, node: &Node<'_>) -> Result<Val, Outcome> {
    layout.decode(node).map_err(|e| match e {
        DecodeError::Json(reason) => Outcome::Rejected {
            reason,
            computed: None,
        },
        DecodeError::Opaque(what) => Outcome::Undetermined {
            reason: format!(
                "{what}: its fields are not in this tool's data, so the checksum cannot be computed"
            ),
        },
    })
}

const CORRUPT: &str = "checkpoint is corrupted (checksum mismatch)";

/// `json.Unmarshal([]byte(data), &x)` with `x` of `data_layout`: the envelopes' second
/// decoding. A failure is `failed(reason)`; an opaque value stays undetermined.
fn decode_data(
    data: &str,
    data_layout: &str,
    failed: impl Fn(String) -> Outcome,
) -> Result<(), Outcome> {
    let inner = hashcompat::parse_json(data.as_bytes()).map_err(|e| failed(e.to_string()))?;
    match decoded(layout(data_layout), &inner) {
        Ok(_) => Ok(()),
        Err(Outcome::Rejected { reason, .. }) => Err(failed(reason)),
        Err(other) => Err(other),
    }
}

/// `checksum.New(cp.Data)`: FNV-32a of the spew text of the root's `Data` string.
fn data_checksum(layout: &Layout, fields: &[Val]) -> u64 {
    let i = layout.field_index("Data");
    hash_text(layout.spew(layout.field_type("Data"), &fields[i]), &[])
}

/// `data` and `dataChecksum` as `json.Unmarshal` leaves them in the struct whatever else fails
/// (it keeps decoding after a type error): a string and an unsigned number, else their zero.
fn data_members(node: &Node<'_>) -> (String, u64) {
    let data = match crate::member(node, "data").map(|n| &n.value) {
        Some(hashcompat::NodeValue::String(s)) => s.to_string(),
        _ => String::new(),
    };
    let sum = match crate::member(node, "dataChecksum").map(|n| &n.value) {
        Some(hashcompat::NodeValue::Number(n)) => n.parse::<u64>().unwrap_or(0),
        _ => 0,
    };
    (data, sum)
}

impl Step {
    /// Whether a rejection by this step is final (see [`Step::DataEnvelope`]).
    fn ends_fallback(&self, node: &Node<'_>) -> bool {
        match self {
            Step::DataEnvelope { .. } => {
                let (data, sum) = data_members(node);
                !data.is_empty() || sum != 0
            }
            _ => false,
        }
    }

    fn run(&self, node: &Node<'_>) -> Outcome {
        match *self {
            Step::Spew {
                layout: name,
                hashed,
                renames,
                zero_accepted,
                dra_without_resource_handles,
                then_decode_data,
            } => {
                let layout = layout(name);
                let mut v = match decoded(layout, node) {
                    Ok(v) => v,
                    Err(outcome) => return outcome,
                };
                let stored = checksum_of(&v, layout, "Checksum");
                if zero_accepted && stored == 0 {
                    return Outcome::Accepted { computed: 0 };
                }
                set_field(&mut v, layout, "Checksum", Val::Uint(0));
                let text = match hashed {
                    Hashed::PtrToRoot => layout.spew_ptr(&layout.root, &v),
                    Hashed::Field(f) => {
                        let Val::Struct(fields) = &v else {
                            unreachable!()
                        };
                        layout.spew(layout.field_type(f), &fields[layout.field_index(f)])
                    }
                };
                let mut computed = hash_text(text, renames);
                if computed != stored && dra_without_resource_handles {
                    match dra_old_shape_checksum(node) {
                        Ok(c) => computed = c,
                        Err(outcome) => return outcome,
                    }
                }
                if computed != stored {
                    return Outcome::Rejected {
                        reason: format!("{CORRUPT}: stored {stored}, computed {computed}"),
                        computed: Some(computed),
                    };
                }
                if let Some((data_layout, what)) = then_decode_data {
                    let Val::Struct(fields) = &v else {
                        unreachable!()
                    };
                    let Val::Str(data) = &fields[layout.field_index("Data")] else {
                        unreachable!("Data is a string")
                    };
                    let failed = |reason: String| Outcome::Rejected {
                        reason: format!("{what}: {reason}"),
                        computed: Some(computed),
                    };
                    if let Err(outcome) = decode_data(data, data_layout, failed) {
                        return outcome;
                    }
                }
                Outcome::Accepted { computed }
            }
            Step::DataEnvelope {
                layout: name,
                data_layout,
                what,
            } => {
                let layout = layout(name);
                let v = match decoded(layout, node) {
                    Ok(v) => v,
                    Err(Outcome::Rejected { reason, computed }) => {
                        return Outcome::Rejected {
                            reason: format!("failed to deserialize {what} checkpoint: {reason}"),
                            computed,
                        }
                    }
                    Err(other) => return other,
                };
                let Val::Struct(fields) = &v else {
                    unreachable!("roots are structs")
                };
                let Val::Str(data) = &fields[layout.field_index("Data")] else {
                    unreachable!("Data is a string")
                };
                // UnmarshalCheckpoint decodes Data before VerifyChecksum runs
                let failed = |reason: String| Outcome::Rejected {
                    reason: format!("failed to deserialize {what} checkpoint data: {reason}"),
                    computed: None,
                };
                if let Err(outcome) = decode_data(data, data_layout, failed) {
                    return outcome;
                }
                let stored = checksum_of(&v, layout, "DataChecksum");
                let computed = data_checksum(layout, fields);
                if computed == stored {
                    Outcome::Accepted { computed }
                } else {
                    Outcome::Rejected {
                        reason: format!("{CORRUPT}: dataChecksum {stored}, computed {computed}"),
                        computed: Some(computed),
                    }
                }
            }
            Step::Versioned {
                layout: name,
                versions,
                what,
            } => {
                let layout = layout(name);
                let v = match decoded(layout, node) {
                    Ok(v) => v,
                    Err(outcome) => return outcome,
                };
                let Val::Struct(fields) = &v else {
                    unreachable!("roots are structs")
                };
                let (Val::Str(version), Val::Str(data)) = (
                    &fields[layout.field_index("Version")],
                    &fields[layout.field_index("Data")],
                ) else {
                    unreachable!("Version and Data are strings")
                };
                let stored = checksum_of(&v, layout, "Checksum");
                let computed = data_checksum(layout, fields);
                if computed != stored {
                    return Outcome::Rejected {
                        reason: format!("{CORRUPT}: stored {stored}, computed {computed}"),
                        computed: Some(computed),
                    };
                }
                let failed = |reason: String| Outcome::Rejected {
                    reason: format!("{what}: {reason}"),
                    computed: Some(computed),
                };
                let Some((_, data_layout)) = versions.iter().find(|(v, _)| v == version) else {
                    let known: Vec<String> =
                        versions.iter().map(|(v, _)| format!("{v:?}")).collect();
                    return failed(format!(
                        "unsupported checkpoint version {version:?}: this kubelet reads {}",
                        known.join(" and ")
                    ));
                };
                match decode_data(data, data_layout, failed) {
                    Ok(()) => Outcome::Accepted { computed },
                    Err(outcome) => outcome,
                }
            }
            Step::Crc32Data { layout: name } => {
                let layout = layout(name);
                let v = match decoded(layout, node) {
                    Ok(v) => v,
                    Err(outcome) => return outcome,
                };
                let stored = checksum_of(&v, layout, "Checksum");
                let Val::Struct(fields) = &v else {
                    unreachable!()
                };
                let Val::Str(data) = &fields[layout.field_index("Data")] else {
                    unreachable!("Data is a string")
                };
                let computed = crc32_ieee(data.as_bytes()) as u64;
                if computed == stored {
                    Outcome::Accepted { computed }
                } else {
                    Outcome::Rejected {
                        reason: format!("{CORRUPT}: stored {stored}, CRC-32 of Data {computed}"),
                        computed: Some(computed),
                    }
                }
            }
        }
    }
}

/// v1.30's `verifyChecksumWithoutResourceHandles`: the decoded entries copied into the old
/// shape under `Version: "v1"` (the constant, not the file's) and a non-nil entry list, printed,
/// renamed back to the old type names, hashed.
fn dra_old_shape_checksum(node: &Node<'_>) -> Result<u64, Outcome> {
    let old = layout("dra-v1-without-resource-handles");
    let mut v = decoded(old, node)?;
    set_field(&mut v, old, "Version", Val::Str("v1".into()));
    set_field(&mut v, old, "Checksum", Val::Uint(0));
    if let Val::Struct(fields) = &mut v {
        let entries = &mut fields[old.field_index("Entries")];
        if *entries == Val::Slice(None) {
            *entries = Val::Slice(Some(Vec::new()));
        }
    }
    Ok(hash_text(
        old.spew_ptr(&old.root, &v),
        &[
            (
                "DRAManagerCheckpointWithoutResourceHandles",
                "DRAManagerCheckpoint",
                1,
            ),
            (
                "ClaimInfoStateListWithoutResourceHandles",
                "ClaimInfoStateList",
                1,
            ),
        ],
    ))
}

const fn spew(layout: &'static str) -> Step {
    Step::Spew {
        layout,
        hashed: Hashed::PtrToRoot,
        renames: &[],
        zero_accepted: false,
        dra_without_resource_handles: false,
        then_decode_data: None,
    }
}

/// DRA manager, v1.30: v1 format with the pre-ResourceHandles fallback.
pub(crate) const DRA_1_30: Reader = Reader {
    source: "kubernetes v1.30.0 pkg/kubelet/cm/dra/state/checkpoint.go VerifyChecksum",
    steps: &[Step::Spew {
        layout: "dra-v1-1.30",
        hashed: Hashed::PtrToRoot,
        renames: &[],
        zero_accepted: false,
        dra_without_resource_handles: true,
        then_decode_data: None,
    }],
};

/// DRA manager, v1.31 and later: the envelope. CRC-32, not the checksum package: PR #126303's
/// final diff drops `checkpointmanager/checksum` from the package, and the checkpoints in
/// upstream's `checkpoint/checkpointer_test.go` carry the CRC-32 of their Data.
pub(crate) const DRA_1_31: Reader = Reader {
    source:
        "kubernetes pkg/kubelet/cm/dra/checkpoint/checkpoint.go UnmarshalCheckpoint (PR #126303)",
    steps: &[Step::Crc32Data {
        layout: "dra-envelope-1.31",
    }],
};

/// Pod status manager, v1.27 to v1.31.
pub(crate) const STATUS_1_27: Reader = Reader {
    source: "kubernetes v1.31 pkg/kubelet/status/state/state_checkpoint.go restoreState",
    steps: &[spew("status-1.27")],
};

/// Pod status manager, v1.32.
pub(crate) const STATUS_1_32: Reader = Reader {
    source: "kubernetes v1.32.0 pkg/kubelet/status/state/checkpoint.go VerifyChecksum",
    steps: &[Step::Spew {
        layout: "status-envelope-1.32",
        hashed: Hashed::Field("Data"),
        renames: &[],
        zero_accepted: false,
        dra_without_resource_handles: false,
        then_decode_data: Some((
            "status-data-1.32",
            "failed to get pod resource allocation info",
        )),
    }],
};

/// CPU manager up to v1.17.
pub(crate) const CPU_1_17: Reader = Reader {
    source: "kubernetes v1.17.0 pkg/kubelet/cm/cpumanager/state/checkpoint.go VerifyChecksum",
    steps: &[Step::Spew {
        layout: "cpu-v1-1.17",
        hashed: Hashed::PtrToRoot,
        renames: &[],
        zero_accepted: true,
        dra_without_resource_handles: false,
        then_decode_data: None,
    }],
};

/// CPU manager from v1.18: V1 (legacy names), then V2.
pub(crate) const CPU_1_18: Reader = Reader {
    source: "kubernetes v1.20.2 pkg/kubelet/cm/cpumanager/state/state_checkpoint.go restoreState",
    steps: &[
        Step::Spew {
            layout: "cpu-v1-1.18",
            hashed: Hashed::PtrToRoot,
            renames: &[("CPUManagerCheckpointV1", "CPUManagerCheckpoint", 1)],
            zero_accepted: true,
            dra_without_resource_handles: false,
            then_decode_data: None,
        },
        Step::Spew {
            layout: "cpu-v2-1.18",
            hashed: Hashed::PtrToRoot,
            renames: &[],
            zero_accepted: true,
            dra_without_resource_handles: false,
            then_decode_data: None,
        },
    ],
};

/// A `checksum.New(cp)`-style step over `layout` whose printed root type name is `renamed`
/// ("CPUManagerCheckpointV2" where the layout's root prints as "CPUManagerCheckpoint"): the
/// text a version hashes when it verifies with its own, renamed struct.
const fn spew_as(layout: &'static str, renames: &'static [Rename], zero_accepted: bool) -> Step {
    Step::Spew {
        layout,
        hashed: Hashed::PtrToRoot,
        renames,
        zero_accepted,
        dra_without_resource_handles: false,
        then_decode_data: None,
    }
}

/// The CPU manager's V1 step as v1.18-v1.36 try it (legacy name).
const CPU_V1_LEGACY: Step = spew_as(
    "cpu-v1-1.18",
    &[("CPUManagerCheckpointV1", "CPUManagerCheckpoint", 1)],
    true,
);
/// V2 verified under its own name `CPUManagerCheckpointV2` (v1.36+, `ck.Verify(cp)`, only with
/// PodLevelResourceManagers disabled).
const CPU_V2_OWN_NAME: Step = spew_as(
    "cpu-v2-1.18",
    &[("CPUManagerCheckpoint", "CPUManagerCheckpointV2", 1)],
    true,
);
/// V2 under the legacy name `CPUManagerCheckpoint`: what v1.18-v1.35 write and v1.36+ write
/// for V2.
const CPU_V2_LEGACY: Step = spew_as("cpu-v2-1.18", &[], true);

/// CPU manager v1.36 with PodLevelResourceManagers disabled (its default): V2, then V1.
pub(crate) const CPU_1_36: Reader = Reader {
    source: "kubernetes v1.36.5 pkg/kubelet/cm/cpumanager/state/state_checkpoint.go restoreState, loadAndMigrateCheckpointV2",
    steps: &[CPU_V2_OWN_NAME, CPU_V2_LEGACY, CPU_V1_LEGACY],
};

/// CPU manager v1.36 with PodLevelResourceManagers enabled: V3 (no zero-checksum pass), then
/// V2 (legacy name only), then V1.
pub(crate) const CPU_1_36_POD_LEVEL: Reader = Reader {
    source: "kubernetes v1.36.5 pkg/kubelet/cm/cpumanager/state/state_checkpoint.go restoreState, loadAndMigrateCheckpointV3",
    steps: &[spew_as("cpu-v3-1.36", &[], false), CPU_V2_LEGACY, CPU_V1_LEGACY],
};

const CPU_V4: Step = Step::DataEnvelope {
    layout: "cpu-v4-1.37",
    data_layout: "cpu-v4-data-1.37",
    what: "cpu manager",
};
/// v1.37's V3 step: its own name `CPUManagerCheckpointV3`, then the legacy name (what v1.36
/// writes).
const CPU_V3_1_37: [Step; 2] = [
    spew_as(
        "cpu-v3-1.36",
        &[("CPUManagerCheckpoint", "CPUManagerCheckpointV3", 1)],
        false,
    ),
    spew_as("cpu-v3-1.36", &[], false),
];

/// CPU manager v1.37 with PodLevelResourceManagers disabled (its default): V4, then V3, then
/// V2; no V1.
pub(crate) const CPU_1_37: Reader = Reader {
    source: "kubernetes v1.37.2 pkg/kubelet/cm/cpumanager/state/state_checkpoint.go loadAndMigrateCheckpointV4",
    steps: &[CPU_V4, CPU_V3_1_37[0], CPU_V3_1_37[1], CPU_V2_OWN_NAME, CPU_V2_LEGACY],
};

/// CPU manager v1.37 with PodLevelResourceManagers enabled: as [`CPU_1_37`] without V2's
/// own-name pass.
pub(crate) const CPU_1_37_POD_LEVEL: Reader = Reader {
    source: "kubernetes v1.37.2 pkg/kubelet/cm/cpumanager/state/state_checkpoint.go loadAndMigrateCheckpointV4",
    steps: &[CPU_V4, CPU_V3_1_37[0], CPU_V3_1_37[1], CPU_V2_LEGACY],
};

/// Memory manager V1 under the legacy name `MemoryManagerCheckpoint` (what v1.21-v1.35 write).
const MEMORY_V1_LEGACY: Step = spew_as("memory-1.21", &[], true);

/// Memory manager v1.36 with PodLevelResourceManagers disabled (its default): V1 only, under
/// its own name `MemoryManagerCheckpointV1`, then the legacy one.
pub(crate) const MEMORY_1_36: Reader = Reader {
    source: "kubernetes v1.36.5 pkg/kubelet/cm/memorymanager/state/state_checkpoint.go restoreState, checkpoint.go VerifyChecksum",
    steps: &[
        spew_as(
            "memory-1.21",
            &[("MemoryManagerCheckpoint", "MemoryManagerCheckpointV1", 1)],
            true,
        ),
        MEMORY_V1_LEGACY,
    ],
};

/// Memory manager v1.36 with PodLevelResourceManagers enabled: V2 (`checksum.New`, no
/// zero-checksum pass), then V1 (legacy name only).
pub(crate) const MEMORY_1_36_POD_LEVEL: Reader = Reader {
    source: "kubernetes v1.36.5 pkg/kubelet/cm/memorymanager/state/state_checkpoint.go loadAndMigrateCheckpointV2",
    steps: &[spew_as("memory-v2-1.36", &[], false), MEMORY_V1_LEGACY],
};

/// Memory manager v1.37, whatever the gate: V3, then V2 (legacy name), then V1 (legacy name).
pub(crate) const MEMORY_1_37: Reader = Reader {
    source: "kubernetes v1.37.2 pkg/kubelet/cm/memorymanager/state/state_checkpoint.go loadAndMigrateCheckpointV3",
    steps: &[
        Step::DataEnvelope {
            layout: "memory-v3-1.37",
            data_layout: "memory-v3-data-1.37",
            what: "memory manager",
        },
        spew_as("memory-v2-1.36", &[], false),
        MEMORY_V1_LEGACY,
    ],
};

const fn device(layout: &'static str) -> Step {
    Step::Spew {
        layout,
        hashed: Hashed::Field("Data"),
        renames: &[],
        zero_accepted: false,
        dra_without_resource_handles: false,
        then_decode_data: None,
    }
}

/// Device manager up to v1.19.
pub(crate) const DEVICE_1_19: Reader = Reader {
    source: "kubernetes v1.19.0 pkg/kubelet/cm/devicemanager/manager.go readCheckpoint",
    steps: &[device("device-1.19")],
};

/// Device manager v1.20 to v1.22 (before the pre-1.20 fallback).
pub(crate) const DEVICE_1_20: Reader = Reader {
    source: "kubernetes v1.20.2 pkg/kubelet/cm/devicemanager/manager.go readCheckpoint",
    steps: &[device("device-1.20")],
};

/// Device manager from v1.23: the current shape, then the pre-1.20 one.
pub(crate) const DEVICE_1_23: Reader = Reader {
    source: "kubernetes v1.23 pkg/kubelet/cm/devicemanager/manager.go readCheckpoint, checkpoint/checkpointv1.go",
    steps: &[
        device("device-1.20"),
        Step::Spew {
            layout: "device-v1-1.23",
            hashed: Hashed::Field("Data"),
            renames: &[
                ("checkpointDataV1", "checkpointData", 1),
                ("PodDevicesEntryV1", "PodDevicesEntry", -1),
            ],
            zero_accepted: false,
            dra_without_resource_handles: false,
            then_decode_data: None,
        },
    ],
};

/// Memory manager, v1.21 to v1.35.
pub(crate) const MEMORY_1_21: Reader = Reader {
    source:
        "kubernetes v1.21..v1.35 pkg/kubelet/cm/memorymanager/state/checkpoint.go VerifyChecksum",
    steps: &[Step::Spew {
        layout: "memory-1.21",
        hashed: Hashed::PtrToRoot,
        renames: &[],
        zero_accepted: true,
        dra_without_resource_handles: false,
        then_decode_data: None,
    }],
};

/// Allocation manager, v1.38: unversioned (v1.33-v1.37, migrated) and "v2" checkpoints. The
/// protobuf PodList inside "v2" data is not decoded: its bytes are under the checksum, so a
/// file that passes holds what a kubelet's `PodList.Marshal` wrote, and protobuf decoding
/// skips the fields a reader does not know.
pub(crate) const ALLOCATION_1_38: Reader = Reader {
    source: "kubernetes v1.38.0-beta.0 pkg/kubelet/allocation/state/state_checkpoint.go restoreState, checkpoint_v2.go GetPodList",
    steps: &[Step::Versioned {
        layout: "allocation-envelope-1.38",
        versions: &[("", "allocation-data-1.33"), ("v2", "allocation-data-1.38")],
        what: "failed to get pod resource information",
    }],
};

/// Allocation manager (allocated_pods_state, actuated_pods_state), v1.33 to v1.37.
pub(crate) const ALLOCATION_1_33: Reader = Reader {
    source: "kubernetes v1.33+ pkg/kubelet/allocation/state/state_checkpoint.go restoreState",
    steps: &[Step::Spew {
        layout: "allocation-envelope-1.33",
        hashed: Hashed::Field("Data"),
        renames: &[],
        zero_accepted: false,
        dra_without_resource_handles: false,
        then_decode_data: Some((
            "allocation-data-1.33",
            "failed to get pod resource information",
        )),
    }],
};
