//! Redis's glob patterns (`SCAN MATCH`, `KEYS`), matched on this side: `list` matches lock
//! names, which it derives from the keys a scan returns, not the keys themselves.

/// Whether `name` matches `pattern` as Redis matches keys: `*` any run of bytes, `?` one
/// byte, `[abc]`, `[^abc]` and `[a-z]` one byte of (or not of) a class, `\x` the byte `x`.
/// A `*` that fails to match goes back to its last try only (no nested backtracking), so the
/// work is at most the product of the two lengths.
pub(crate) fn matches(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    // After the last `*`: where the pattern goes on, and where the name's next try starts.
    let mut star: Option<(usize, usize)> = None;
    while i < name.len() {
        if pattern.get(p) == Some(&b'*') {
            p += 1;
            star = Some((p, i));
            continue;
        }
        if let Some(next) = one(pattern, p, name[i]) {
            p = next;
            i += 1;
            continue;
        }
        match star {
            Some((after, tried)) => {
                p = after;
                i = tried + 1;
                star = Some((after, tried + 1));
            }
            None => return false,
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&b| b == b'*')
}

/// Matches the pattern's element at `p` (not a `*`) against `c`: where the next element
/// starts, or `None`.
fn one(pattern: &[u8], p: usize, c: u8) -> Option<usize> {
    match *pattern.get(p)? {
        b'?' => Some(p + 1),
        b'\\' if p + 1 < pattern.len() => (pattern[p + 1] == c).then_some(p + 2),
        b'[' => class(pattern, p + 1, c),
        b => (b == c).then_some(p + 1),
    }
}

/// A class starting at `p` (after its `[`), as Redis reads it: `^` first negates, `\`
/// escapes, `a-z` is a range either way round, and an unclosed class ends with the pattern.
fn class(pattern: &[u8], mut p: usize, c: u8) -> Option<usize> {
    let negate = pattern.get(p) == Some(&b'^');
    if negate {
        p += 1;
    }
    let mut hit = false;
    while p < pattern.len() && pattern[p] != b']' {
        if pattern[p] == b'\\' && p + 1 < pattern.len() {
            hit |= pattern[p + 1] == c;
            p += 2;
        } else if p + 2 < pattern.len() && pattern[p + 1] == b'-' && pattern[p + 2] != b']' {
            let (a, b) = (pattern[p], pattern[p + 2]);
            hit |= (a.min(b)..=a.max(b)).contains(&c);
            p += 3;
        } else {
            hit |= pattern[p] == c;
            p += 1;
        }
    }
    (hit != negate).then_some((p + 1).min(pattern.len()))
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn as_redis_matches_keys() {
        let yes: [(&str, &str); 14] = [
            ("*", ""),
            ("*", "invoice:nightly"),
            ("invoice:*", "invoice:nightly"),
            ("*nightly", "invoice:nightly"),
            ("in*ce*ly", "invoice:nightly"),
            ("h?llo", "hello"),
            ("h[ae]llo", "hallo"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("h[b-a]llo", "hallo"),
            ("h\\*llo", "h*llo"),
            ("a*b*c", "aXbYbZc"),
            ("**", "x"),
            ("job[12]", "job2"),
        ];
        for (p, n) in yes {
            assert!(matches(p.as_bytes(), n.as_bytes()), "{p} should match {n}");
        }
        let no: [(&str, &str); 9] = [
            ("invoice:*", "report:daily"),
            ("h?llo", "hllo"),
            ("h[ae]llo", "hillo"),
            ("h[^e]llo", "hello"),
            ("h\\*llo", "hello"),
            ("a*b*c", "aXbYbZ"),
            ("abc", "abcd"),
            ("", "a"),
            ("job[12]", "job3"),
        ];
        for (p, n) in no {
            assert!(
                !matches(p.as_bytes(), n.as_bytes()),
                "{p} should not match {n}"
            );
        }
    }

    #[test]
    fn many_stars_stay_quick() {
        let name = vec![b'a'; 4000];
        let pattern = [&b"*a"[..]; 200].concat();
        let mut long = pattern.clone();
        long.push(b'b');
        assert!(matches(&pattern, &name));
        assert!(!matches(&long, &name));
    }
}
