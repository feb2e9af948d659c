//! Time, understood: relative time expressions in a text ("yesterday",
//! "last Saturday", "two weeks ago", "next month", "this weekend", "May 7")
//! resolved against the moment the text was said, and the periods a query
//! names ("in July 2023").
//!
//! The date arithmetic of the day and weekday forms ("yesterday", "last
//! Friday", "3 weeks ago") is the `interim` crate's; this module finds the
//! expressions in free text, normalises them for it ("two" → "2", "a" →
//! "1"), and adds what it does not parse: whole periods ("last week", "this
//! weekend", "next month", "last year"), "N weekends ago", month names with
//! or without a day, and years after a preposition. Each resolution keeps
//! the words it came from, so a search can show why a turn matched a date.
//!
//! ```
//! use chrono::{NaiveDate, TimeZone, Utc};
//! use cairn_memory::search::{Granularity, resolve_times};
//!
//! // Said on Thursday 25 May 2023.
//! let at = Utc.with_ymd_and_hms(2023, 5, 25, 13, 14, 0).unwrap();
//! let found = resolve_times("I ran a charity race last Saturday.", at);
//! assert_eq!(found.len(), 1);
//! assert_eq!(found[0].expression, "last Saturday");
//! assert_eq!(found[0].start, NaiveDate::from_ymd_opt(2023, 5, 20).unwrap());
//! assert_eq!(found[0].granularity, Granularity::Day);
//! assert_eq!(found[0].label(), "20 May 2023");
//! ```

use std::ops::Range;

use chrono::{DateTime, Datelike, Days, Months, NaiveDate, Utc, Weekday};
use interim::{Dialect, parse_date_string};
use serde::{Deserialize, Serialize};

/// How wide a resolved time is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Granularity {
    /// One day.
    Day,
    /// A Saturday and the Sunday after it.
    Weekend,
    /// A week, Monday to Sunday.
    Week,
    /// A calendar month.
    Month,
    /// A calendar year.
    Year,
}

/// One time expression found in a text and the absolute period it means.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeMention {
    /// Byte range of the expression in the text.
    pub span: Range<usize>,
    /// The expression as written.
    pub expression: String,
    /// First day of the period.
    pub start: NaiveDate,
    /// How wide the period is.
    pub granularity: Granularity,
}

impl TimeMention {
    /// The day after the period (exclusive end).
    pub fn end(&self) -> NaiveDate {
        end_of(self.start, self.granularity)
    }

    /// Whether the period overlaps `[start, end)`.
    pub fn overlaps(&self, start: NaiveDate, end: NaiveDate) -> bool {
        self.start < end && start < self.end()
    }

    /// The period in words, as indexed: "7 May 2023", "week of 1 May 2023",
    /// "weekend of 6 May 2023", "May 2023", "2023".
    pub fn label(&self) -> String {
        let day = self.start.format("%-d %B %Y");
        match self.granularity {
            Granularity::Day => day.to_string(),
            Granularity::Weekend => format!("weekend of {day}"),
            Granularity::Week => format!("week of {day}"),
            Granularity::Month => self.start.format("%B %Y").to_string(),
            Granularity::Year => self.start.format("%Y").to_string(),
        }
    }

    /// `expression → label`, for a search's explanation.
    pub fn explain(&self) -> String {
        format!("{} → {}", self.expression, self.label())
    }
}

/// A period a query names: `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    /// First day.
    pub start: NaiveDate,
    /// The day after the last.
    pub end: NaiveDate,
}

fn end_of(start: NaiveDate, g: Granularity) -> NaiveDate {
    let next = match g {
        Granularity::Day => start.checked_add_days(Days::new(1)),
        Granularity::Weekend => start.checked_add_days(Days::new(2)),
        Granularity::Week => start.checked_add_days(Days::new(7)),
        Granularity::Month => start.checked_add_months(Months::new(1)),
        Granularity::Year => start.checked_add_months(Months::new(12)),
    };
    next.unwrap_or(NaiveDate::MAX)
}

/// One word of the text: lower-cased, with its byte range and whether it
/// began with a capital letter.
#[derive(Debug)]
struct Word {
    text: String,
    span: Range<usize>,
    capital: bool,
}

fn words(text: &str) -> Vec<Word> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        match (c.is_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                let raw = &text[s..i];
                out.push(Word {
                    text: raw.to_lowercase(),
                    span: s..i,
                    capital: raw.chars().next().is_some_and(char::is_uppercase),
                });
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// 1-based month of a full month name or a three-letter abbreviation
/// ("sept" too).
fn month_of(w: &str) -> Option<u32> {
    if w.len() < 3 {
        return None;
    }
    crate::text::MONTHS[..12]
        .iter()
        .position(|m| {
            *m == w || (w.len() == 3 && m.starts_with(w)) || (w == "sept" && *m == "september")
        })
        .map(|i| i as u32 + 1)
}

fn weekday_of(w: &str) -> Option<Weekday> {
    Some(match w {
        "monday" => Weekday::Mon,
        "tuesday" => Weekday::Tue,
        "wednesday" => Weekday::Wed,
        "thursday" => Weekday::Thu,
        "friday" => Weekday::Fri,
        "saturday" => Weekday::Sat,
        "sunday" => Weekday::Sun,
        _ => return None,
    })
}

/// A small count written as digits or as a word.
fn count_of(w: &str) -> Option<u32> {
    if let Ok(n) = w.parse::<u32>() {
        return (1..=100).contains(&n).then_some(n);
    }
    Some(match w {
        "a" | "an" | "one" => 1,
        "two" => 2,
        "three" => 3,
        "four" => 4,
        "five" => 5,
        "six" => 6,
        "seven" => 7,
        "eight" => 8,
        "nine" => 9,
        "ten" => 10,
        "eleven" => 11,
        "twelve" => 12,
        _ => return None,
    })
}

/// A day of the month: "7", "7th", "21st".
fn day_of(w: &str) -> Option<u32> {
    let digits = w.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &w[digits.len()..];
    if !matches!(suffix, "" | "st" | "nd" | "rd" | "th") {
        return None;
    }
    digits.parse().ok().filter(|d| (1..=31).contains(d))
}

fn year_of(w: &str) -> Option<i32> {
    if w.len() != 4 {
        return None;
    }
    w.parse().ok().filter(|y| (1900..=2100).contains(y))
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Unit {
    Day,
    Week,
    Weekend,
    Month,
    Year,
}

fn unit_of(w: &str) -> Option<Unit> {
    Some(match w {
        "day" | "days" => Unit::Day,
        "week" | "weeks" => Unit::Week,
        "weekend" | "weekends" => Unit::Weekend,
        "month" | "months" => Unit::Month,
        "year" | "years" => Unit::Year,
        _ => return None,
    })
}

/// -1 (last, past), 0 (this), +1 (next, coming).
fn direction_of(w: &str) -> Option<i32> {
    Some(match w {
        "last" | "past" | "previous" => -1,
        "this" => 0,
        "next" | "coming" => 1,
        _ => return None,
    })
}

const PREPOSITIONS: [&str; 11] = [
    "in", "since", "during", "from", "of", "by", "until", "till", "back", "early", "late",
];

/// Asks interim for a day relative to `at` (the forms it parses: today,
/// yesterday, tomorrow, `[last|next] <weekday>`, `N <unit> ago`, `N <unit>`).
fn interim_day(expr: &str, at: DateTime<Utc>) -> Option<NaiveDate> {
    parse_date_string(expr, at, Dialect::Uk)
        .ok()
        .map(|d| d.date_naive())
}

fn monday_of(d: NaiveDate) -> Option<NaiveDate> {
    d.checked_sub_days(Days::new(u64::from(d.weekday().num_days_from_monday())))
}

fn shift_weeks(d: NaiveDate, weeks: i64) -> Option<NaiveDate> {
    d.checked_add_signed(chrono::Duration::weeks(weeks))
}

fn shift_months(d: NaiveDate, months: i32) -> Option<NaiveDate> {
    if months >= 0 {
        d.checked_add_months(Months::new(months.unsigned_abs()))
    } else {
        d.checked_sub_months(Months::new(months.unsigned_abs()))
    }
}

/// The period `n` units from the one containing `today` (n < 0: before).
fn period(today: NaiveDate, unit: Unit, n: i32) -> Option<(NaiveDate, Granularity)> {
    Some(match unit {
        Unit::Day => (
            today.checked_add_signed(chrono::Duration::days(i64::from(n)))?,
            Granularity::Day,
        ),
        Unit::Week => (
            shift_weeks(monday_of(today)?, i64::from(n))?,
            Granularity::Week,
        ),
        Unit::Weekend => {
            let saturday = monday_of(today)?.checked_add_days(Days::new(5))?;
            (shift_weeks(saturday, i64::from(n))?, Granularity::Weekend)
        }
        Unit::Month => (shift_months(today.with_day(1)?, n)?, Granularity::Month),
        Unit::Year => (
            NaiveDate::from_ymd_opt(today.year().checked_add(n)?, 1, 1)?,
            Granularity::Year,
        ),
    })
}

/// A resolution found at a word: the number of words it spans, the first
/// day and the granularity.
type Found = (usize, NaiveDate, Granularity);

/// Tries every form at word `i`, longest first.
fn at_word(w: &[Word], i: usize, at: DateTime<Utc>) -> Option<Found> {
    let today = at.date_naive();
    let word = |k: usize| w.get(i + k).map(|x| x.text.as_str());
    let first = word(0)?;
    // today / tonight / yesterday / tomorrow / last night
    match first {
        "today" | "tonight" | "yesterday" | "tomorrow" => {
            let expr = if first == "tonight" { "today" } else { first };
            return interim_day(expr, at).map(|d| (1, d, Granularity::Day));
        }
        _ => {}
    }
    if let Some(dir) = direction_of(first) {
        let next = word(1)?;
        if next == "night" && dir == -1 {
            return interim_day("yesterday", at).map(|d| (2, d, Granularity::Day));
        }
        // "the next day" is relative to a story, not to the turn.
        if let Some(unit) = unit_of(next).filter(|u| *u != Unit::Day && !next.ends_with('s')) {
            return period(today, unit, dir).map(|(d, g)| (2, d, g));
        }
        if let Some(day) = weekday_of(next) {
            let expr = match dir {
                -1 => format!("last {day:?}"),
                1 => format!("next {day:?}"),
                _ => format!("{day:?}"),
            };
            let d = interim_day(&expr, at)?;
            // On the weekday itself, "last" means a week ago and "next" the
            // week after: never the day of the turn.
            let d = match dir {
                -1 if d >= today => d.checked_sub_days(Days::new(7))?,
                1 if d <= today => d.checked_add_days(Days::new(7))?,
                _ => d,
            };
            return Some((2, d, Granularity::Day));
        }
        if let Some(m) = month_of(next).filter(|_| w[i + 1].capital) {
            let this = NaiveDate::from_ymd_opt(today.year(), m, 1)?;
            let start = match dir {
                -1 if this >= today.with_day(1)? => shift_months(this, -12)?,
                1 if this <= today.with_day(1)? => shift_months(this, 12)?,
                _ => this,
            };
            return Some((2, start, Granularity::Month));
        }
        return None;
    }
    // N units ago / N units from now / in N units
    let (lead, n_at) = match first {
        "in" => (1, 1),
        _ => (0, 0),
    };
    if let Some(mut n) = word(n_at).and_then(count_of) {
        let mut k = n_at + 1;
        if word(k) == Some("couple") && word(k + 1) == Some("of") && word(n_at) == Some("a") {
            n = 2;
            k += 2;
        }
        if let Some(unit) = word(k).and_then(unit_of) {
            let sign = match (lead, word(k + 1), word(k + 2)) {
                (0, Some("ago"), _) => Some((-1, k + 2)),
                (0, Some("from"), Some("now")) => Some((1, k + 3)),
                (1, _, _) => Some((1, k + 1)),
                _ => None,
            };
            if let Some((sign, len)) = sign {
                let n = i32::try_from(n).ok()? * sign;
                let resolved = match unit {
                    // interim does the day and week arithmetic.
                    Unit::Day | Unit::Week => {
                        let days = if unit == Unit::Week { n * 7 } else { n };
                        let expr = if days < 0 {
                            format!("{} days ago", -days)
                        } else {
                            format!("{days} days")
                        };
                        let d = interim_day(&expr, at)?;
                        if unit == Unit::Week {
                            (monday_of(d)?, Granularity::Week)
                        } else {
                            (d, Granularity::Day)
                        }
                    }
                    _ => period(today, unit, n)?,
                };
                return Some((len, resolved.0, resolved.1));
            }
        }
    }
    if lead == 1 {
        // "in <Month> [year]" / "in <year>"
        if let Some(y) = word(1).and_then(year_of) {
            return Some((2, NaiveDate::from_ymd_opt(y, 1, 1)?, Granularity::Year));
        }
        return None;
    }
    // explicit dates: "May 7[th][,] [2023]", "7[th] [of] May [2023]", "May 2023"
    if let Some(m) = month_of(first) {
        // "may" and "march" are verbs too: lower-case, they are not months.
        let named = w[i].capital || first.len() > 3 && first != "may" && first != "march";
        if !named {
            return None;
        }
        if let Some(d) = word(1).and_then(day_of) {
            let (y, len) = match word(2).and_then(year_of) {
                Some(y) => (y, 3),
                None => (today.year(), 2),
            };
            return NaiveDate::from_ymd_opt(y, m, d).map(|x| (len, x, Granularity::Day));
        }
        if let Some(y) = word(1).and_then(year_of) {
            return Some((2, NaiveDate::from_ymd_opt(y, m, 1)?, Granularity::Month));
        }
        let after_preposition = i > 0 && PREPOSITIONS.contains(&w[i - 1].text.as_str());
        if w[i].capital && after_preposition {
            return Some((
                1,
                NaiveDate::from_ymd_opt(today.year(), m, 1)?,
                Granularity::Month,
            ));
        }
        return None;
    }
    if let Some(d) = day_of(first) {
        let k = if word(1) == Some("of") { 2 } else { 1 };
        if let Some(m) = word(k).and_then(month_of) {
            let (y, len) = match word(k + 1).and_then(year_of) {
                Some(y) => (y, k + 2),
                None => (today.year(), k + 1),
            };
            return NaiveDate::from_ymd_opt(y, m, d).map(|x| (len, x, Granularity::Day));
        }
    }
    if let Some(y) = year_of(first)
        && i > 0
        && PREPOSITIONS.contains(&w[i - 1].text.as_str())
    {
        return Some((1, NaiveDate::from_ymd_opt(y, 1, 1)?, Granularity::Year));
    }
    None
}

/// Every time expression in `text`, resolved against `at` (when the text
/// was said), in order of appearance; overlapping forms never both match.
pub fn resolve_times(text: &str, at: DateTime<Utc>) -> Vec<TimeMention> {
    let w = words(text);
    let mut out = Vec::new();
    let mut i = 0;
    while i < w.len() {
        match at_word(&w, i, at) {
            Some((len, start, granularity)) if len > 0 => {
                let last = &w[(i + len - 1).min(w.len() - 1)];
                let span = w[i].span.start..last.span.end;
                out.push(TimeMention {
                    expression: text[span.clone()].to_owned(),
                    span,
                    start,
                    granularity,
                });
                i += len;
            }
            _ => i += 1,
        }
    }
    out
}

/// The periods a query names explicitly ("in July 2023", "on 7 May 2023",
/// "in 2022"): only forms that need no reference time (a month without a
/// year is left out: which year is unknown).
pub fn named_periods(query: &str) -> Vec<Period> {
    // The reference only fills in what the query leaves open, and those
    // forms are dropped: only expressions that write a year are kept.
    let at = DateTime::<Utc>::UNIX_EPOCH;
    resolve_times(query, at)
        .into_iter()
        .filter(|m| {
            m.expression
                .split(|c: char| !c.is_alphanumeric())
                .any(|w| year_of(w).is_some())
        })
        .map(|m| Period {
            start: m.start,
            end: m.end(),
        })
        .collect()
}

/// Whether a query asks for a time: "when", "what date", "which year",
/// "how long ago"…
///
/// ```
/// use cairn_memory::search::asks_when;
/// assert!(asks_when("When did Ana adopt the puppy?"));
/// assert!(asks_when("In which year did they move?"));
/// assert!(!asks_when("What is the puppy's name?"));
/// ```
pub fn asks_when(query: &str) -> bool {
    let w: Vec<String> = words(query).into_iter().map(|w| w.text).collect();
    w.iter().enumerate().any(|(i, x)| {
        let next = w.get(i + 1).map(String::as_str);
        match x.as_str() {
            "when" => true,
            "what" | "which" => matches!(
                next,
                Some("date" | "day" | "month" | "year" | "week" | "weekend" | "time")
            ),
            "how" => next == Some("long") && w.get(i + 2).map(String::as_str) == Some("ago"),
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use proptest::prelude::*;

    use super::*;

    /// Thursday 25 May 2023, 13:14 UTC.
    fn at() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2023, 5, 25, 13, 14, 0).unwrap()
    }

    fn ymd(y: i32, m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, d).unwrap()
    }

    /// Each expression found in `text` said at [`at`], as `expression → label`.
    fn check(text: &str, expect: &[&str]) {
        let got: Vec<String> = resolve_times(text, at())
            .iter()
            .map(TimeMention::explain)
            .collect();
        assert_eq!(got, expect, "in {text:?}");
    }

    #[test]
    fn days_relative_to_the_turn() {
        check(
            "I went to a support group yesterday.",
            &["yesterday → 24 May 2023"],
        );
        check("Today was long", &["Today → 25 May 2023"]);
        check("see you tomorrow", &["tomorrow → 26 May 2023"]);
        check("we talked last night", &["last night → 24 May 2023"]);
        check("tonight we cook", &["tonight → 25 May 2023"]);
    }

    #[test]
    fn weekdays_with_a_direction() {
        check(
            "I ran a race last Saturday",
            &["last Saturday → 20 May 2023"],
        );
        check("last thursday was fun", &["last thursday → 18 May 2023"]);
        // UK reading: "next Friday" is the Friday of next week.
        check("next Friday works", &["next Friday → 2 June 2023"]);
        check("this Saturday we hike", &["this Saturday → 27 May 2023"]);
        // A bare weekday is ambiguous in tense and is left alone.
        check("on Saturday we hiked", &[]);
    }

    #[test]
    fn counts_ago_and_ahead() {
        check("two weeks ago", &["two weeks ago → week of 8 May 2023"]);
        check("3 days ago", &["3 days ago → 22 May 2023"]);
        check("a week ago", &["a week ago → week of 15 May 2023"]);
        check(
            "a couple of days ago",
            &["a couple of days ago → 23 May 2023"],
        );
        check("ten years ago", &["ten years ago → 2013"]);
        check("two months ago", &["two months ago → March 2023"]);
        check(
            "two weekends ago",
            &["two weekends ago → weekend of 13 May 2023"],
        );
        check("in two weeks", &["in two weeks → week of 5 June 2023"]);
        check("5 days from now", &["5 days from now → 30 May 2023"]);
        // A duration is not a point in time.
        check("I've known them for 4 years", &[]);
    }

    #[test]
    fn whole_periods() {
        check("last week", &["last week → week of 15 May 2023"]);
        check("this weekend", &["this weekend → weekend of 27 May 2023"]);
        check("last weekend", &["last weekend → weekend of 20 May 2023"]);
        check("next month", &["next month → June 2023"]);
        check("this month", &["this month → May 2023"]);
        check("last year", &["last year → 2022"]);
        check("the past week", &["past week → week of 15 May 2023"]);
    }

    #[test]
    fn explicit_dates_and_months() {
        check("on May 7 we met", &["May 7 → 7 May 2023"]);
        check("May 7th, 2022 was it", &["May 7th, 2022 → 7 May 2022"]);
        check("the 4th of July", &["4th of July → 4 July 2023"]);
        check("on 8 May, 2023", &["8 May, 2023 → 8 May 2023"]);
        check("in June 2021", &["June 2021 → June 2021"]);
        check("We go camping in June", &["June → June 2023"]);
        check("last June", &["last June → June 2022"]);
        check("next March", &["next March → March 2024"]);
        check("since 2019", &["2019 → 2019"]);
        check("in 2022", &["in 2022 → 2022"]);
        // "may" the verb, and numbers that are not years, are left alone.
        check("I may go, it costs 2023 dollars", &[]);
        check("I may 5 times", &[]);
    }

    #[test]
    fn spans_point_at_the_words() {
        let text = "Hey! I ran a race last Saturday, and yesterday I rested.";
        let found = resolve_times(text, at());
        let spans: Vec<&str> = found.iter().map(|m| &text[m.span.clone()]).collect();
        assert_eq!(spans, ["last Saturday", "yesterday"]);
    }

    #[test]
    fn queries_name_periods_only_with_a_year() {
        let p = named_periods("What did Ana do in July 2023?");
        assert_eq!(
            p,
            [Period {
                start: ymd(2023, 7, 1),
                end: ymd(2023, 8, 1)
            }]
        );
        assert_eq!(
            named_periods("What happened on 7 May 2023?")[0].start,
            ymd(2023, 5, 7)
        );
        assert_eq!(
            named_periods("What did Ana do in 2022?")[0].end,
            ymd(2023, 1, 1)
        );
        assert!(named_periods("What did Ana do in July?").is_empty());
        assert!(named_periods("What did Ana do last week?").is_empty());
    }

    #[test]
    fn when_questions() {
        assert!(asks_when("When did Caroline go to the support group?"));
        assert!(asks_when("How long ago was her birthday?"));
        assert!(asks_when("What year did she move?"));
        assert!(!asks_when("How long has she had her friends?"));
        assert!(!asks_when("What did she paint?"));
    }

    fn weekday_name() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "Monday",
            "Tuesday",
            "Wednesday",
            "Thursday",
            "Friday",
            "Saturday",
            "Sunday",
        ])
    }

    proptest! {
        /// "last <weekday>" is that weekday, within the seven days before
        /// the turn; "next <weekday>" is that weekday after it.
        #[test]
        fn last_and_next_weekday(days in 0i64..20_000, day in weekday_name()) {
            let at = Utc.with_ymd_and_hms(1990, 1, 1, 12, 0, 0).unwrap() + chrono::Duration::days(days);
            let today = at.date_naive();
            let last = resolve_times(&format!("last {day}"), at);
            prop_assert_eq!(last.len(), 1);
            let d = last[0].start;
            prop_assert_eq!(format!("{:?}", d.weekday()), day[..3].to_owned());
            prop_assert!(d < today && today - d <= chrono::Duration::days(7));
            let next = resolve_times(&format!("next {day}"), at);
            prop_assert!(next[0].start > today);
            prop_assert_eq!(next[0].start.weekday(), d.weekday());
        }

        /// "N days ago" is exactly N days before; "N weeks ago" contains the
        /// day 7N days before.
        #[test]
        fn counts_ago(days in 0i64..20_000, n in 1u32..60) {
            let at = Utc.with_ymd_and_hms(1990, 1, 1, 12, 0, 0).unwrap() + chrono::Duration::days(days);
            let today = at.date_naive();
            let d = resolve_times(&format!("{n} days ago"), at);
            prop_assert_eq!(d[0].start, today - chrono::Duration::days(i64::from(n)));
            let w = resolve_times(&format!("{n} weeks ago"), at);
            let target = today - chrono::Duration::weeks(i64::from(n));
            prop_assert!(w[0].start <= target && target < w[0].end());
        }

        /// Whatever the text, spans are in order, inside it, and name what
        /// they say.
        #[test]
        fn spans_are_sound(text in "[a-zA-Z0-9 ,.]{0,80}") {
            let found = resolve_times(&text, at());
            let mut prev = 0;
            for m in &found {
                prop_assert!(m.span.start >= prev && m.span.end <= text.len());
                prop_assert_eq!(&text[m.span.clone()], m.expression.as_str());
                prop_assert!(m.start < m.end());
                prev = m.span.end;
            }
        }
    }
}
