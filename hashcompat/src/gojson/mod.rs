//! Go `encoding/json`, as far as the kubelet's container hash needs it: a reader that decodes
//! input the way Go's decoder sees it ([`parse`]), and the encoder of the JSON hash forms
//! ([`encode`]).

pub mod encode;
pub mod parse;
