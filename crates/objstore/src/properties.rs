//! An object's properties beside its bytes: user metadata (`x-amz-meta-NAME:
//! VALUE` headers) and tags (a separate sub-resource, `?tagging`, of up to 10
//! key-value pairs, which S3 bills and lifecycle rules select by). GustFS shows
//! both as extended attributes (gust-client's objects.rs maps them).
//!
//! On the wire, tags travel three ways: a count in a GET or HEAD reply
//! (`x-amz-tagging-count`, so an object without tags costs no second request),
//! a query string in the `x-amz-tagging` header of a PUT or a multipart upload's
//! start, and an XML document (`<Tagging><TagSet><Tag>…`) of the tagging
//! requests.

/// An object's user metadata, `x-amz-meta-NAME: VALUE` on the wire: (NAME, VALUE),
/// names lowercase as stores keep them, in name order.
pub type Metadata = Vec<(String, String)>;

/// An object's tags: (KEY, VALUE), in key order.
pub type Tags = Vec<(String, String)>;

/// Most tags an object may carry (S3's bound).
pub const TAGS_MAX: usize = 10;

/// Whether S3 takes tag `key=value`: a key of 1 to 128 characters not starting
/// with `aws:`, a value of at most 256, both of letters, digits, spaces and
/// `+ - = . _ : / @` (AWS's rule for tags across its services).
pub fn tag_ok(key: &str, value: &str) -> bool {
    let chars_ok = |s: &str| s.chars().all(|c| c.is_alphanumeric() || c == ' ' || "+-=._:/@".contains(c));
    let key_len = key.chars().count();
    (1..=128).contains(&key_len)
        && !key.starts_with("aws:")
        && value.chars().count() <= 256
        && chars_ok(key)
        && chars_ok(value)
}

/// What an object carries besides its bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Properties {
    pub meta: Metadata,
    pub tags: Tags,
}

/// The `x-amz-tagging` header's value for `tags`: a URL query string.
pub fn tagging_header(tags: &Tags) -> String {
    url::form_urlencoded::Serializer::new(String::new()).extend_pairs(tags.iter()).finish()
}

/// The body of a PutObjectTagging request.
pub(crate) fn tagging_document(tags: &Tags) -> String {
    let mut s = String::from("<Tagging xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><TagSet>");
    for (k, v) in tags {
        s.push_str(&format!("<Tag><Key>{}</Key><Value>{}</Value></Tag>", escape(k), escape(v)));
    }
    s.push_str("</TagSet></Tagging>");
    s
}

/// The tags of a GetObjectTagging reply, in key order.
pub(crate) fn parse_tagging(xml: &str) -> Tags {
    let mut tags: Tags = xml
        .split("<Tag>")
        .skip(1)
        .map(|block| {
            let block = block.split("</Tag>").next().unwrap_or("");
            (crate::store::tag(block, "Key"), crate::store::tag(block, "Value"))
        })
        .filter(|(k, _)| !k.is_empty())
        .collect();
    tags.sort();
    tags
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&apos;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_s3_refuses_are_known() {
        assert!(tag_ok("project", "ocean 2026/raw:v1@site"));
        assert!(tag_ok("Ψ", "é"), "letters of any script");
        for (k, v) in [("", "x"), ("aws:x", "y"), ("a&b", "x"), ("k", "<raw>"), ("k", &"v".repeat(257))] {
            assert!(!tag_ok(k, v), "{k}={v}");
        }
        assert!(!tag_ok(&"k".repeat(129), "v"));
    }

    #[test]
    fn tags_travel_as_a_query_string_and_as_xml() {
        let tags: Tags = vec![("project".into(), "a&b c".into()), ("stage".into(), "<raw>".into())];
        assert_eq!(tagging_header(&tags), "project=a%26b+c&stage=%3Craw%3E");
        let doc = tagging_document(&tags);
        assert!(doc.contains("<Key>project</Key><Value>a&amp;b c</Value>"), "{doc}");
        // A reply as stores send it (with their namespace and declaration).
        let mut reversed = tags.clone();
        reversed.reverse();
        let reply = tagging_document(&reversed).replace("<Tag>", "\n  <Tag>");
        let reply = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{reply}");
        assert_eq!(parse_tagging(&reply), tags, "in key order");
        assert_eq!(parse_tagging("<Tagging><TagSet></TagSet></Tagging>"), Tags::new());
    }
}
