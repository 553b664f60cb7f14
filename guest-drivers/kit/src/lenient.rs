//! Fields of a provider's answer read into typed structs without failing on a field of an
//! unexpected type. Model servers differ (a local server sends `"usage": null`, another a
//! list where OpenAI sends a string), and one odd field must not cost the whole answer, so
//! each wrapper here takes the JSON type it expects and reads anything else (null
//! included) as absent, skipping it without building anything. Strings are borrowed from
//! the body when they hold no escapes.
//!
//! Use them as `#[serde(default)]` fields of a `#[derive(Deserialize)]` struct: a missing
//! field is then absent too, and unknown fields are skipped by serde.

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

/// A string, or `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Str<'a>(pub Option<Cow<'a, str>>);

/// A non-negative integer, or `None` (a fraction or a negative number is no count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count(pub Option<u64>);

/// An object read as `T`, or `None`.
#[derive(Debug, Clone, PartialEq)]
pub struct Obj<T>(pub Option<T>);

/// A list of `T`, or `None`.
#[derive(Debug, Clone, PartialEq)]
pub struct List<T>(pub Option<Vec<T>>);

/// Whether the field holds anything but null.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Present(pub bool);

impl<'a> Str<'a> {
    pub fn as_deref(&self) -> Option<&str> {
        self.0.as_deref()
    }

    /// The string, empty when absent.
    pub fn or_empty(&self) -> &str {
        self.0.as_deref().unwrap_or_default()
    }
}

impl<T> Obj<T> {
    pub fn as_ref(&self) -> Option<&T> {
        self.0.as_ref()
    }
}

impl<T> List<T> {
    /// The items, none when absent.
    pub fn items(&self) -> &[T] {
        self.0.as_deref().unwrap_or_default()
    }
}

// By hand: a derived `Default` would ask `T: Default`.
impl<T> Default for Obj<T> {
    fn default() -> Self {
        Obj(None)
    }
}

impl<T> Default for List<T> {
    fn default() -> Self {
        List(None)
    }
}

/// What a wrapper makes of each JSON type; whatever it does not take becomes
/// [`Wanted::other`] (after its contents are skipped) and null becomes the default.
pub trait Wanted<'de>: Default {
    fn other() -> Self {
        Self::default()
    }

    fn string(_text: Cow<'de, str>) -> Self {
        Self::other()
    }

    fn count(_n: u64) -> Self {
        Self::other()
    }

    fn map<A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Self::other())
    }

    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Self::other())
    }
}

/// Reads any JSON value into a [`Wanted`].
pub struct Lenient<T>(PhantomData<T>);

impl<T> Lenient<T> {
    /// `deserializer`'s next value, whatever its type.
    pub fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<T, D::Error>
    where
        T: Wanted<'de>,
    {
        deserializer.deserialize_any(Lenient(PhantomData))
    }
}

impl<'de, T: Wanted<'de>> Visitor<'de> for Lenient<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_none<E>(self) -> Result<T, E> {
        Ok(T::default())
    }

    fn visit_bool<E>(self, _: bool) -> Result<T, E> {
        Ok(T::other())
    }

    fn visit_u64<E>(self, n: u64) -> Result<T, E> {
        Ok(T::count(n))
    }

    fn visit_i64<E>(self, n: i64) -> Result<T, E> {
        Ok(u64::try_from(n).map_or_else(|_| T::other(), T::count))
    }

    fn visit_f64<E>(self, _: f64) -> Result<T, E> {
        Ok(T::other())
    }

    fn visit_borrowed_str<E>(self, text: &'de str) -> Result<T, E> {
        Ok(T::string(Cow::Borrowed(text)))
    }

    fn visit_str<E>(self, text: &str) -> Result<T, E> {
        Ok(T::string(Cow::Owned(text.to_string())))
    }

    fn visit_string<E>(self, text: String) -> Result<T, E> {
        Ok(T::string(Cow::Owned(text)))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::map(map)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        T::seq(seq)
    }
}

impl<'de: 'a, 'a> Wanted<'de> for Str<'a> {
    fn string(text: Cow<'de, str>) -> Self {
        Str(Some(text))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Lenient::read(d)
    }
}

impl Wanted<'_> for Count {
    fn count(n: u64) -> Self {
        Count(Some(n))
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Lenient::read(d)
    }
}

impl Wanted<'_> for Present {
    fn other() -> Self {
        Present(true)
    }
}

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Lenient::read(d)
    }
}

impl<'de, T: Deserialize<'de>> Wanted<'de> for Obj<T> {
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(|t| Obj(Some(t)))
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Lenient::read(d)
    }
}

impl<'de, T: Deserialize<'de>> Wanted<'de> for List<T> {
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(List(Some(items)))
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Lenient::read(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct Shape<'a> {
        #[serde(borrow)]
        name: Str<'a>,
        n: Count,
        error: Present,
        #[serde(borrow)]
        inner: Obj<Inner<'a>>,
        items: List<Obj<Inner<'a>>>,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct Inner<'a> {
        #[serde(borrow)]
        name: Str<'a>,
        n: Count,
    }

    fn read(json: &str) -> Shape<'_> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn each_field_takes_its_type_and_reads_any_other_as_absent() {
        let shape = read(
            r#"{"name":"a","n":3,"error":{"x":[1]},"inner":{"name":"b","n":-1},"items":[{"n":1},2,null],"other":{"deep":[{}]}}"#,
        );
        assert_eq!(shape.name.as_deref(), Some("a"));
        assert_eq!(shape.n, Count(Some(3)));
        assert!(shape.error.0);
        let inner = shape.inner.as_ref().unwrap();
        assert_eq!((inner.name.or_empty(), inner.n), ("b", Count(None)));
        let items = shape.items.items();
        assert_eq!(items.len(), 3);
        assert_eq!(items[0].as_ref().map(|s| s.n), Some(Count(Some(1))));
        assert!(items[1].as_ref().is_none() && items[2].as_ref().is_none());

        let odd = read(r#"{"name":7,"n":1.5,"error":null,"inner":"x","items":{"a":1}}"#);
        assert_eq!(odd.name, Str(None));
        assert_eq!(odd.n, Count(None));
        assert!(!odd.error.0);
        assert!(odd.inner.as_ref().is_none());
        assert!(odd.items.0.is_none());
        assert!(read("{}").items.items().is_empty());
    }

    #[test]
    fn strings_without_escapes_are_borrowed() {
        let shape = read(r#"{"name":"plain","inner":{"name":"t\u00e9\n"}}"#);
        assert!(matches!(shape.name.0, Some(Cow::Borrowed("plain"))));
        assert_eq!(shape.inner.as_ref().unwrap().name.or_empty(), "té\n");
    }

    #[test]
    fn broken_json_still_fails() {
        assert!(serde_json::from_str::<Shape>(r#"{"name":"a""#).is_err());
        assert!(serde_json::from_str::<Shape>(r#"{"items":[1,}"#).is_err());
    }
}
