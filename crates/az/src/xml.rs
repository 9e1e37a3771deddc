//! The XML the Blob service answers with: listings (List Blobs), block
//! lists (Get Block List) and error bodies; and the block list haul sends
//! (Put Block List). Read with `xmlparser`, a pull parser: each element's
//! text is handed over, entities decoded, with the path of elements above
//! it, and each reader picks what it needs by the path's end.

use xmlparser::{ElementEnd, Token, Tokenizer};

/// Elements deeper than this are not Azure's, and not followed.
const MAX_DEPTH: usize = 64;

/// One blob of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub size: u64,
    /// Seconds since the epoch.
    pub last_modified: Option<i64>,
    pub etag: Option<String>,
    pub metadata: Vec<(String, String)>,
}

/// One page of List Blobs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub blobs: Vec<Listed>,
    /// With a delimiter: the prefixes directly below, each ending in it.
    pub prefixes: Vec<String>,
    /// The marker of the next page; none after the last.
    pub next: Option<String>,
}

/// An element just closed: its path (outermost first, its own name last)
/// and its text (percent-decoded where the element said `Encoded="true"`,
/// as Azure writes names with characters XML cannot hold).
struct Closed<'a> {
    path: &'a [String],
    text: String,
}

impl Closed<'_> {
    /// Whether the path ends with `tail`.
    fn is(&self, tail: &[&str]) -> bool {
        self.path.len() >= tail.len()
            && self.path[self.path.len() - tail.len()..]
                .iter()
                .zip(tail)
                .all(|(a, b)| a == b)
    }

    /// Whether the path above this element ends with `tail`.
    fn under(&self, tail: &[&str]) -> bool {
        let above = Closed {
            path: &self.path[..self.path.len().saturating_sub(1)],
            text: String::new(),
        };
        !self.path.is_empty() && above.is(tail)
    }

    /// The element's own name.
    fn name(&self) -> &str {
        self.path.last().map_or("", |s| s.as_str())
    }
}

/// Walks `xml`, handing each closed element to `each`.
fn walk(xml: &str, mut each: impl FnMut(Closed) -> Result<(), String>) -> Result<(), String> {
    let mut path: Vec<String> = Vec::new();
    let mut texts: Vec<(String, bool)> = Vec::new();
    for token in Tokenizer::from(xml) {
        match token.map_err(|e| format!("not XML: {e}"))? {
            Token::ElementStart { local, .. } => {
                if path.len() >= MAX_DEPTH {
                    return Err("XML nested too deep".into());
                }
                path.push(local.as_str().to_string());
                texts.push((String::new(), false));
            }
            Token::Attribute { local, value, .. } => {
                if let Some(t) = texts.last_mut() {
                    t.1 |= local.as_str() == "Encoded" && value.as_str() == "true";
                }
            }
            Token::Text { text } => {
                if let Some(t) = texts.last_mut() {
                    t.0.push_str(&unescape(text.as_str()));
                }
            }
            Token::Cdata { text, .. } => {
                if let Some(t) = texts.last_mut() {
                    t.0.push_str(text.as_str());
                }
            }
            Token::ElementEnd {
                end: ElementEnd::Close(..) | ElementEnd::Empty,
                ..
            } => {
                let (text, encoded) = texts.pop().ok_or("XML closes an element never opened")?;
                let text = if encoded {
                    percent_encoding::percent_decode_str(&text)
                        .decode_utf8_lossy()
                        .into_owned()
                } else {
                    text
                };
                each(Closed { path: &path, text })?;
                path.pop();
            }
            _ => {}
        }
    }
    Ok(())
}

/// Decodes XML's five entities and character references; anything else
/// stays as written.
pub fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let decoded = rest
            .find(';')
            .filter(|&end| end <= 12)
            .and_then(|end| entity(&rest[1..end]).map(|c| (c, end)));
        match decoded {
            Some((c, end)) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn entity(name: &str) -> Option<char> {
    match name {
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        _ => {
            let n = name.strip_prefix('#')?;
            let code = match n.strip_prefix('x').or_else(|| n.strip_prefix('X')) {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => n.parse().ok()?,
            };
            char::from_u32(code)
        }
    }
}

/// Escapes text for an element's content.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A page of List Blobs.
pub fn listing(xml: &str) -> Result<Listing, String> {
    let mut out = Listing::default();
    let mut cur = Listed::default();
    walk(xml, |c| {
        if c.is(&["Blob", "Name"]) {
            cur.name = c.text;
        } else if c.is(&["Blob", "Properties", "Content-Length"]) {
            cur.size = c
                .text
                .trim()
                .parse()
                .map_err(|_| format!("a listed blob's Content-Length is {:?}", c.text))?;
        } else if c.is(&["Blob", "Properties", "Last-Modified"]) {
            cur.last_modified = crate::time::parse(&c.text);
        } else if c.is(&["Blob", "Properties", "Etag"]) {
            cur.etag = Some(c.text);
        } else if c.under(&["Blob", "Metadata"]) {
            cur.metadata.push((c.name().to_string(), c.text));
        } else if c.is(&["Blobs", "Blob"]) {
            let b = std::mem::take(&mut cur);
            if b.name.is_empty() {
                return Err("a listed blob has no name".into());
            }
            out.blobs.push(b);
        } else if c.is(&["BlobPrefix", "Name"]) {
            out.prefixes.push(c.text);
        } else if c.is(&["EnumerationResults", "NextMarker"]) && !c.text.is_empty() {
            out.next = Some(c.text);
        }
        Ok(())
    })?;
    Ok(out)
}

/// The uncommitted blocks of Get Block List: (block id, size) each.
pub fn uncommitted_blocks(xml: &str) -> Result<Vec<(String, u64)>, String> {
    let mut out = Vec::new();
    let (mut name, mut size) = (String::new(), 0u64);
    walk(xml, |c| {
        if c.is(&["UncommittedBlocks", "Block", "Name"]) {
            name = c.text;
        } else if c.is(&["UncommittedBlocks", "Block", "Size"]) {
            size = c
                .text
                .trim()
                .parse()
                .map_err(|_| format!("a block's Size is {:?}", c.text))?;
        } else if c.is(&["UncommittedBlocks", "Block"]) {
            out.push((std::mem::take(&mut name), std::mem::take(&mut size)));
        }
        Ok(())
    })?;
    Ok(out)
}

/// The `Code` and `Message` of an error body, where it has them.
pub fn error(xml: &str) -> (Option<String>, Option<String>) {
    let (mut code, mut message) = (None, None);
    let _ = walk(xml, |c| {
        if c.is(&["Error", "Code"]) {
            code = Some(c.text.trim().to_string());
        } else if c.is(&["Error", "Message"]) {
            message = Some(c.text.trim().to_string());
        }
        Ok(())
    });
    (code, message)
}

/// The body of Put Block List: every block id, in order, uncommitted.
pub fn block_list(ids: &[String]) -> String {
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
    for id in ids {
        s.push_str(&format!("<Uncommitted>{}</Uncommitted>", escape(id)));
    }
    s.push_str("</BlockList>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PAGE: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<EnumerationResults ServiceEndpoint="http://127.0.0.1:10000/devstoreaccount1" ContainerName="data">
  <Prefix>a/</Prefix><Delimiter>/</Delimiter>
  <Blobs>
    <Blob><Name>a/x &amp; y&lt;1&gt;.txt</Name>
      <Properties><Last-Modified>Sun, 06 Nov 1994 08:49:37 GMT</Last-Modified><Etag>0x8D1</Etag>
        <Content-Length>12</Content-Length><BlobType>BlockBlob</BlobType></Properties>
      <Metadata><haul_mtime>17.000000005</haul_mtime></Metadata>
    </Blob>
    <Blob><Name Encoded="true">a/%EF%BF%BEodd</Name><Properties><Content-Length>0</Content-Length></Properties><Metadata/></Blob>
    <BlobPrefix><Name>a/sub/</Name></BlobPrefix>
  </Blobs>
  <NextMarker>2!48!bWFya2Vy</NextMarker>
</EnumerationResults>"#;

    #[test]
    fn a_page() {
        let l = listing(PAGE).unwrap();
        assert_eq!(l.blobs.len(), 2);
        let b = &l.blobs[0];
        assert_eq!(b.name, "a/x & y<1>.txt");
        assert_eq!((b.size, b.last_modified), (12, Some(784_111_777)));
        assert_eq!(b.etag.as_deref(), Some("0x8D1"));
        assert_eq!(
            b.metadata,
            vec![("haul_mtime".into(), "17.000000005".into())]
        );
        assert_eq!(l.blobs[1].name, "a/\u{fffe}odd");
        assert!(l.blobs[1].metadata.is_empty());
        assert_eq!(l.prefixes, vec!["a/sub/".to_string()]);
        assert_eq!(l.next.as_deref(), Some("2!48!bWFya2Vy"));
        let last =
            listing("<EnumerationResults><Blobs/><NextMarker/></EnumerationResults>").unwrap();
        assert_eq!(last, Listing::default());
    }

    #[test]
    fn block_lists() {
        let xml = r#"<?xml version="1.0" encoding="utf-8"?><BlockList>
          <CommittedBlocks><Block><Name>Y29tbWl0</Name><Size>9</Size></Block></CommittedBlocks>
          <UncommittedBlocks><Block><Name>YS0wMDAwMDE=</Name><Size>5</Size></Block>
          <Block><Name>YS0wMDAwMDI=</Name><Size>7</Size></Block></UncommittedBlocks></BlockList>"#;
        assert_eq!(
            uncommitted_blocks(xml).unwrap(),
            vec![("YS0wMDAwMDE=".into(), 5), ("YS0wMDAwMDI=".into(), 7)]
        );
        assert_eq!(
            block_list(&["YQ==".into(), "Yg==".into()]),
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList><Uncommitted>YQ==</Uncommitted>\
             <Uncommitted>Yg==</Uncommitted></BlockList>"
        );
    }

    #[test]
    fn errors_and_entities() {
        let xml = "\u{feff}<?xml version=\"1.0\"?><Error><Code>ContainerNotFound</Code>\
                   <Message>The specified container does not exist.\nRequestId:1</Message></Error>";
        let (code, msg) = error(xml);
        assert_eq!(code.as_deref(), Some("ContainerNotFound"));
        assert!(msg.unwrap().starts_with("The specified container"));
        assert_eq!(error("not xml"), (None, None));
        assert_eq!(unescape("&#65;&#x42;&amp;&bogus;&"), "AB&&bogus;&");
        assert_eq!(escape("a<&>"), "a&lt;&amp;&gt;");
    }

    fn xmlish() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("<Blob>".to_string()),
            Just("</Blob>".to_string()),
            Just("<Blobs>".to_string()),
            Just("<Name>".to_string()),
            Just("</Name>".to_string()),
            Just("<Name Encoded=\"true\">".to_string()),
            Just("<Properties><Content-Length>".to_string()),
            Just("</Content-Length></Properties>".to_string()),
            Just("<Metadata><k>".to_string()),
            Just("<UncommittedBlocks><Block><Size>".to_string()),
            Just("<NextMarker>".to_string()),
            Just("<Error><Code>".to_string()),
            Just("&#x110000;&amp;&#;&".to_string()),
            "[a-z0-9%<>/&;#= \"]{0,12}",
        ];
        prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
    }

    proptest! {
        #[test]
        fn parsers_never_panic(s in prop_oneof![xmlish(), ".{0,200}"]) {
            let _ = listing(&s);
            let _ = uncommitted_blocks(&s);
            let _ = error(&s);
            let _ = unescape(&s);
        }
    }
}
