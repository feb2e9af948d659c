//! What shape of answer a question asks for, read from its words alone
//! (no names, no dates, nothing about one data set).

/// Whether a query asks for several things that are likely said at
/// different times: a plural object after "what"/"which" ("What books has
/// Ana read?", "Which cities…", "What kinds of…"), "how many", "both",
/// "what are some…". Such an answer is spread over sessions, so the
/// recipe can rank those questions for breadth
/// ([`RecipeParams::list_cap`](super::RecipeParams::list_cap)).
///
/// ```
/// use cairn_memory::search::asks_many;
/// assert!(asks_many("What instruments does Ana play?"));
/// assert!(asks_many("Which cities has Jon visited?"));
/// assert!(asks_many("What kinds of pottery has she made?"));
/// assert!(!asks_many("What is the puppy's name?"));
/// assert!(!asks_many("What kind of car did Jon buy?"));
/// ```
pub fn asks_many(query: &str) -> bool {
    let w: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let has = |x: &str| w.iter().any(|y| y == x);
    if has("both") || w.windows(2).any(|p| p[0] == "how" && p[1] == "many") {
        return true;
    }
    // The question word: first, or after a preposition ("In what ways…").
    let Some(q) = w.iter().take(3).position(|x| x == "what" || x == "which") else {
        return false;
    };
    let mut rest = &w[q + 1..];
    match rest {
        [k, of, ..] if of == "of" && matches!(k.as_str(), "kinds" | "types" | "sorts") => {
            return true;
        }
        // "what kind of X": one kind, unless X itself is plural.
        [k, of, tail @ ..] if of == "of" && matches!(k.as_str(), "kind" | "type" | "sort") => {
            rest = tail;
        }
        [are, some, ..] if matches!(are.as_str(), "are" | "were") && some == "some" => {
            return true;
        }
        [are, the, tail @ ..] if matches!(are.as_str(), "are" | "were") && the == "the" => {
            rest = tail;
        }
        _ => {}
    }
    // A plural noun before the verb: "What (european) countries has…".
    rest.iter()
        .take(4)
        .take_while(|x| !is_auxiliary(x))
        .any(|x| looks_plural(x))
}

fn is_auxiliary(w: &str) -> bool {
    matches!(
        w,
        "has"
            | "have"
            | "had"
            | "does"
            | "do"
            | "did"
            | "is"
            | "are"
            | "was"
            | "were"
            | "will"
            | "would"
            | "can"
            | "could"
            | "should"
            | "might"
    )
}

/// An English plural by its ending, or one of the common irregular ones.
fn looks_plural(w: &str) -> bool {
    matches!(
        w,
        "children" | "people" | "men" | "women" | "feet" | "teeth"
    ) || (w.len() > 3
        && w.ends_with('s')
        && !w.ends_with("ss")
        && !w.ends_with("us")
        && !w.ends_with("is")
        && w != "news")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_counts_ask_for_many() {
        for q in [
            "What activities does Ana partake in?",
            "What are some changes she has faced?",
            "What are the names of Jon's children?",
            "In what ways is Ana helping the community?",
            "How many times has Jon gone to the beach?",
            "Did Ana and Jon both run a marathon?",
            "Which people did she meet while volunteering?",
            "What types of yoga has Maria practiced?",
            "What kind of concerts does Jon like?",
        ] {
            assert!(asks_many(q), "{q}");
        }
    }

    #[test]
    fn list_parameters_apply_to_list_questions_only() {
        let p = crate::search::RecipeParams {
            list_cap: 4,
            list_smoothing: Some(0.0),
            ..Default::default()
        };
        let list = p.for_query("What books has Ana read?");
        assert_eq!((list.session_cap, list.smoothing), (4, 0.0));
        assert_eq!(list.session_boost, p.session_boost);
        assert_eq!(p.for_query("What is Ana's favourite book?"), p);
        let off = crate::search::RecipeParams::default();
        assert_eq!(off.for_query("What books has Ana read?"), off);
    }

    #[test]
    fn one_thing_is_not_many() {
        for q in [
            "What is Ana's relationship status?",
            "Where did Ana move from?",
            "What did Jon paint recently?",
            "What kind of car did Jon buy?",
            "When did Ana go to the support group?",
            "What is the focus of the business?",
            "Why did Gina start her store?",
            "What exciting news did Maria share?",
            "",
        ] {
            assert!(!asks_many(q), "{q}");
        }
    }
}
