//! The built-in corpus: generated, deterministic text with structure that a small model can learn
//! and where depth helps. No file, no network.
//!
//! Each document holds 1 to 4 lines of one of three tasks:
//! - **grammar**: sentences with subject-verb agreement across a relative clause
//!   (`the old dogs that the cat sees follow a red ship.`);
//! - **brackets**: balanced sequences of `()[]{}<>` nested up to 6 deep, where each closing
//!   bracket must match the most recent open one (`brackets: ([{<>}]())`);
//! - **arithmetic**: additions of 1-4 digit numbers with their answers (`347+2895=3242`).

use crate::seed::splitmix64;

const NOUNS: [(&str, &str); 10] = [
    ("cat", "cats"),
    ("dog", "dogs"),
    ("bird", "birds"),
    ("child", "children"),
    ("king", "kings"),
    ("ship", "ships"),
    ("farmer", "farmers"),
    ("horse", "horses"),
    ("teacher", "teachers"),
    ("river", "rivers"),
];
const VERBS: [(&str, &str); 8] = [
    ("sees", "see"),
    ("likes", "like"),
    ("follows", "follow"),
    ("finds", "find"),
    ("carries", "carry"),
    ("watches", "watch"),
    ("helps", "help"),
    ("remembers", "remember"),
];
const ADJECTIVES: [&str; 8] = ["red", "small", "old", "quick", "quiet", "bright", "tired", "young"];

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        (splitmix64(self.0) % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// `n_docs` documents, the same for the same `seed`.
pub fn builtin_documents(n_docs: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng(seed);
    (0..n_docs)
        .map(|_| {
            let task = rng.below(3);
            let lines = 1 + rng.below(4);
            let mut doc = String::new();
            for line in 0..lines {
                if line > 0 {
                    doc.push('\n');
                }
                match task {
                    0 => doc.push_str(&sentence(&mut rng)),
                    1 => doc.push_str(&brackets(&mut rng)),
                    _ => doc.push_str(&addition(&mut rng)),
                }
            }
            doc
        })
        .collect()
}

fn noun_phrase(rng: &mut Rng, plural: bool) -> String {
    let (singular, plural_form) = *rng.pick(&NOUNS);
    let noun = if plural { plural_form } else { singular };
    let article = if plural { "the" } else { *rng.pick(&["the", "a"]) };
    if rng.below(2) == 0 {
        format!("{article} {} {noun}", rng.pick(&ADJECTIVES))
    } else {
        format!("{article} {noun}")
    }
}

fn verb(rng: &mut Rng, plural: bool) -> &'static str {
    let (singular, plural_form) = *rng.pick(&VERBS);
    if plural {
        plural_form
    } else {
        singular
    }
}

fn sentence(rng: &mut Rng) -> String {
    let plural = rng.below(2) == 0;
    let subject = noun_phrase(rng, plural);
    let relative = if rng.below(2) == 0 {
        let inner_plural = rng.below(2) == 0;
        let inner = noun_phrase(rng, inner_plural);
        format!(" that {inner} {}", verb(rng, inner_plural))
    } else {
        String::new()
    };
    let object_plural = rng.below(2) == 0;
    format!("{subject}{relative} {} {}.", verb(rng, plural), noun_phrase(rng, object_plural))
}

fn brackets(rng: &mut Rng) -> String {
    const PAIRS: [(char, char); 4] = [('(', ')'), ('[', ']'), ('{', '}'), ('<', '>')];
    let length = 4 + rng.below(13);
    let mut stack = Vec::new();
    let mut out = String::from("brackets: ");
    for step in 0..length {
        let remaining = length - step;
        let must_close = stack.len() >= remaining || stack.len() >= 6;
        if !stack.is_empty() && (must_close || rng.below(2) == 0) {
            out.push(stack.pop().unwrap_or(')'));
        } else {
            let (open, close) = *rng.pick(&PAIRS);
            out.push(open);
            stack.push(close);
        }
    }
    while let Some(close) = stack.pop() {
        out.push(close);
    }
    out
}

fn addition(rng: &mut Rng) -> String {
    let number = |rng: &mut Rng| {
        let digits = 1 + rng.below(4) as u32;
        rng.below(10usize.pow(digits))
    };
    let (a, b) = (number(rng), number(rng));
    format!("{a}+{b}={}", a + b)
}
