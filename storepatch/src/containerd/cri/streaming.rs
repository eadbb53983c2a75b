//! A streaming decoder of the CRI metadata JSON: the fields [`Decoded`] needs, read in one pass
//! without building the document's tree (the scan decodes every record of the node, and a
//! `serde_json::Value` per record cost most of that decode: a map and a string per field of
//! every mount, env and device of the container's config).
//!
//! It answers only where it is sure to agree with the tree decoder ([`super::decode_doc`], the
//! reference): on anything unusual (a type the CRI plugin would refuse, a key with escapes, a
//! number that is not a plain uint32 attempt, invalid JSON) it gives up with `None` and the
//! caller asks the reference, which also words the error. The fuzz target `cri_extension_edit`
//! and the tests below hold it to that: whenever it answers, the reference answers the same.

use super::Decoded;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::collections::BTreeMap;
use std::fmt;

/// `Some` = what the reference decoder would return for `json` (apart from the field scan of
/// [`super::annotations_of_valid`], which the caller runs either way); `None` = ask it.
pub(super) fn decode(json: &[u8]) -> Option<Decoded> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let top = de.deserialize_map(TopVisitor).ok()?;
    de.end().ok()?;
    top
}

/// The `visit_*` methods of a visitor that takes every scalar (null, booleans, numbers,
/// strings) and answers `$value` for it.
macro_rules! scalars_give {
    ($value:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

/// A value we do not read, parsed as the tree decoder parses it (strings decoded and checked
/// for UTF-8 and lone surrogates, numbers converted) without keeping it.
/// `serde::de::IgnoredAny` would not do: it skips a string's bytes and escapes unchecked, so a
/// document the reference refuses (a lone `"\ud800"`, invalid UTF-8) would pass.
struct Skip;

impl<'de> de::Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SkipVisitor)
    }
}

struct SkipVisitor;

impl<'de> Visitor<'de> for SkipVisitor {
    type Value = Skip;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        // (a number past 64 bits arrives here too, as a map of NUMBER_TOKEN: it gives up as
        // well, and the reference reads it)
        let mut first = true;
        while let Some(IsNumberToken(token)) = map.next_key()? {
            if std::mem::take(&mut first) && token {
                return Err(give_up());
            }
            map.next_value::<Skip>()?;
        }
        Ok(Skip)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Skip)
    }
    scalars_give!(Skip);
}

/// Any error: give up, the reference decides.
fn give_up<E: de::Error>() -> E {
    E::custom("not for the streaming decoder")
}

/// The key serde_json gives the one member of the map it hands a visitor for a number that
/// does not fit 64 bits, under its `arbitrary_precision` feature (hashcompat turns it on for
/// the whole build); its tree decoder reads any object whose first key is this as a number
/// (refusing it unless the member is a number in a string). Go reads such an object as an
/// object: an object starting with this key gives up, and the reference decides, as before the
/// streaming decoder existed.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// A key read only to tell whether it is [`NUMBER_TOKEN`] (no copy of it is made).
struct IsNumberToken(bool);

impl<'de> de::Deserialize<'de> for IsNumberToken {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = IsNumberToken;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<IsNumberToken, E> {
                Ok(IsNumberToken(s == NUMBER_TOKEN))
            }
        }
        d.deserialize_str(V)
    }
}

/// Gives up when `key` is the first key of its object and [`NUMBER_TOKEN`].
fn check_first<E: de::Error>(first: &mut bool, key: Option<&str>) -> Result<(), E> {
    if std::mem::take(first) && key == Some(NUMBER_TOKEN) {
        return Err(give_up());
    }
    Ok(())
}

/// The next key of an object as a borrowed string: a key with escapes gives up (none of the
/// fields we read is spelled with one by containerd, and the reference handles it exactly).
/// `first`: whether no key of this object was read yet ([`check_first`]).
fn next_key<'de, A: MapAccess<'de>>(
    map: &mut A,
    first: &mut bool,
) -> Result<Option<&'de str>, A::Error> {
    let key = map.next_key::<&'de str>()?;
    check_first(first, key)?;
    Ok(key)
}

struct TopVisitor;

impl<'de> Visitor<'de> for TopVisitor {
    type Value = Option<Decoded>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a CRI metadata object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // Duplicate keys: the tree decoder keeps the last value, and so does every field here.
        let mut version_v1 = false;
        let mut metadata: Option<Decoded> = None;
        let mut first = true;
        while let Some(key) = next_key(&mut map, &mut first)? {
            match key {
                "Version" => version_v1 = map.next_value::<Str>()?.0.as_deref() == Some("v1"),
                "Metadata" => metadata = Some(map.next_value_seed(ObjectSeed(MetadataVisitor))?),
                _ => {
                    map.next_value::<Skip>()?;
                }
            }
        }
        if !version_v1 {
            return Err(give_up());
        }
        Ok(metadata)
    }
}

/// A string or null (`None`); anything else gives up.
struct Str(Option<String>);

impl<'de> de::Deserialize<'de> for Str {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Str;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or null")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Str, E> {
                Ok(Str(Some(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Str, E> {
                Ok(Str(Some(s)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Str, E> {
                Ok(Str(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// An object read by the visitor inside; anything else (null included) gives up.
struct ObjectSeed<V>(V);

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for ObjectSeed<V> {
    type Value = V::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        d.deserialize_map(self.0)
    }
}

/// An object read by the visitor inside, or null (`None`); anything else gives up.
struct NullableObjectSeed<V>(V);

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for NullableObjectSeed<V> {
    type Value = Option<V::Value>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        struct Nullable<V>(V);
        impl<'de, V: Visitor<'de>> Visitor<'de> for Nullable<V> {
            type Value = Option<V::Value>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                self.0.visit_map(map).map(Some)
            }
        }
        d.deserialize_any(Nullable(self.0))
    }
}

struct MetadataVisitor;

impl<'de> Visitor<'de> for MetadataVisitor {
    type Value = Decoded;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the Metadata object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Decoded, A::Error> {
        let mut d = Decoded::default();
        let mut config: Option<Config> = None;
        let mut first = true;
        while let Some(key) = next_key(&mut map, &mut first)? {
            match key {
                "ID" => d.id = map.next_value::<Str>()?.0,
                "Name" => d.name = map.next_value::<Str>()?.0,
                "SandboxID" => d.sandbox_id = map.next_value::<Str>()?.0,
                "Config" => config = map.next_value_seed(NullableObjectSeed(ConfigVisitor))?,
                _ => {
                    map.next_value::<Skip>()?;
                }
            }
        }
        if let Some(c) = config {
            d.labels = c.labels;
            d.annotations = c.annotations;
            d.config_image = c.image;
            if let Some(md) = c.metadata {
                d.meta_name = md.name;
                d.meta_namespace = md.namespace;
                d.meta_uid = md.uid;
                d.attempt = Some(md.attempt);
            }
        }
        Ok(d)
    }
}

#[derive(Default)]
struct Config {
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    metadata: Option<ContainerMetadata>,
    image: Option<String>,
}

struct ConfigVisitor;

impl<'de> Visitor<'de> for ConfigVisitor {
    type Value = Config;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the Config object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Config, A::Error> {
        let mut c = Config::default();
        let mut first = true;
        while let Some(key) = next_key(&mut map, &mut first)? {
            match key {
                "labels" => {
                    c.labels = map
                        .next_value_seed(NullableObjectSeed(StringMapVisitor))?
                        .unwrap_or_default()
                }
                "annotations" => {
                    c.annotations = map
                        .next_value_seed(NullableObjectSeed(StringMapVisitor))?
                        .unwrap_or_default()
                }
                "metadata" => {
                    c.metadata =
                        map.next_value_seed(NullableObjectSeed(ContainerMetadataVisitor))?
                }
                // The reference reads `image.image` only when `image` is an object and ignores
                // any other value.
                "image" => c.image = map.next_value_seed(ImageSeed)?,
                _ => {
                    map.next_value::<Skip>()?;
                }
            }
        }
        Ok(c)
    }
}

/// `labels` / `annotations`: string members kept, null members dropped (as the reference
/// skips them; a later null drops an earlier string of the same key, as the tree keeps the
/// last), any other member gives up.
struct StringMapVisitor;

impl<'de> Visitor<'de> for StringMapVisitor {
    type Value = BTreeMap<String, String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map of strings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = BTreeMap::new();
        let mut first = true;
        while let Some(key) = map.next_key::<String>()? {
            check_first(&mut first, Some(&key))?;
            match map.next_value::<Str>()?.0 {
                Some(v) => {
                    out.insert(key, v);
                }
                None => {
                    out.remove(&key);
                }
            }
        }
        Ok(out)
    }
}

struct ContainerMetadata {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    attempt: u32,
}

struct ContainerMetadataVisitor;

impl<'de> Visitor<'de> for ContainerMetadataVisitor {
    type Value = ContainerMetadata;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the Config.metadata object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut md = ContainerMetadata {
            name: None,
            namespace: None,
            uid: None,
            // absent or null: 0, as the reference reads it
            attempt: 0,
        };
        let mut first = true;
        while let Some(key) = next_key(&mut map, &mut first)? {
            match key {
                "name" => md.name = map.next_value::<Str>()?.0,
                "namespace" => md.namespace = map.next_value::<Str>()?.0,
                "uid" => md.uid = map.next_value::<Str>()?.0,
                "attempt" => md.attempt = map.next_value::<Attempt>()?.0,
                _ => {
                    map.next_value::<Skip>()?;
                }
            }
        }
        Ok(md)
    }
}

/// A non-negative integer that fits a u32, or null (0); anything else gives up.
struct Attempt(u32);

impl<'de> de::Deserialize<'de> for Attempt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Attempt;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a uint32 or null")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Attempt, E> {
                u32::try_from(n).map(Attempt).map_err(|_| give_up())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Attempt, E> {
                Ok(Attempt(0))
            }
        }
        d.deserialize_any(V)
    }
}

/// `Config.image`: `Some(image.image)` for an object, `None` for any other value (read whole).
struct ImageSeed;

impl<'de> DeserializeSeed<'de> for ImageSeed {
    type Value = Option<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
        d.deserialize_any(ImageVisitor)
    }
}

struct ImageVisitor;

impl<'de> Visitor<'de> for ImageVisitor {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut image = None;
        let mut first = true;
        while let Some(key) = next_key(&mut map, &mut first)? {
            match key {
                "image" => image = map.next_value::<Str>()?.0,
                _ => {
                    map.next_value::<Skip>()?;
                }
            }
        }
        Ok(image)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(None)
    }

    scalars_give!(None);
}
