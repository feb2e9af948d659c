//! `cairn topics …`: define, inspect, pause and delete topics, approve or
//! reject proposals, collect on request, and read the gate log (`why`), on
//! the data dir through the `Cairn` facade.

use std::io::Write;

use anyhow::{Context, Result};
use cairn::topics::{
    Activation, GateRecord, Priority, Scope, Source, Subscription, TopicSpec, Trigger, TurnRef,
};
use cairn::{Cairn, CairnConfig, Destination, ReadAs};
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand, ValueEnum};

#[derive(Debug, Subcommand)]
pub(crate) enum TopicsAction {
    /// Define a topic (refused, naming the field, if it is invalid).
    Create(SpecArgs),
    /// Replace a topic's definition (same name); bumps its generation.
    Update(SpecArgs),
    /// The workspace's topics.
    List(JsonArg),
    /// A topic, what it collected and its pending proposals.
    Show(ShowArgs),
    /// Stop a topic watching.
    Pause(NameArg),
    /// Let a paused topic watch again.
    Resume(NameArg),
    /// Delete a topic with its memberships, proposals and gate log.
    Delete(NameArg),
    /// A topic's proposals (pending only unless --all).
    Proposals(ProposalsArgs),
    /// Approve a proposal: the turn becomes a member.
    Approve(TurnArgs),
    /// Reject a proposal.
    Reject(TurnArgs),
    /// A topic's assertion candidates (pending only unless --all).
    Candidates(ProposalsArgs),
    /// Accept an assertion candidate: a `fact` entry holds it.
    Accept(TurnArgs),
    /// Dismiss an assertion candidate.
    Dismiss(TurnArgs),
    /// Collect on request over the existing record (a manual topic's only way).
    Collect(CollectArgs),
    /// Feed text to a topic's webhook (`--text`, or standard input).
    Feed(FeedArgs),
    /// Run the topics' schedules that are due now (the server's ticker
    /// does this by itself).
    Schedules(JsonArg),
    /// Why a topic did or did not collect a turn (`session/seq`).
    Why(TurnArgs),
    /// A topic's gate log, newest first.
    Log(LogArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum SourceArg {
    Chat,
    ToolOutput,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ActivationArg {
    Auto,
    Gated,
    Manual,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum PriorityArg {
    Low,
    Medium,
    High,
    Critical,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ScopeArg {
    Input,
    Output,
    Both,
}

#[derive(Debug, Args)]
pub(crate) struct SpecArgs {
    /// The topic's name (a kebab-case slug).
    name: String,
    /// What the topic wants collected.
    #[arg(long)]
    description: String,
    /// A keyword trigger (repeatable).
    #[arg(long)]
    keyword: Vec<String>,
    /// A phrase trigger (repeatable).
    #[arg(long)]
    phrase: Vec<String>,
    /// A regex trigger (repeatable).
    #[arg(long)]
    regex: Vec<String>,
    /// A subject trigger (repeatable).
    #[arg(long)]
    subject: Vec<String>,
    /// A cron schedule trigger (five fields).
    #[arg(long)]
    schedule: Option<String>,
    /// An inbound webhook trigger.
    #[arg(long)]
    webhook: bool,
    /// Which turns it watches.
    #[arg(long, value_enum, default_value = "input")]
    scope: ScopeArg,
    /// When it collects.
    #[arg(long, value_enum, default_value = "gated")]
    activation: ActivationArg,
    /// Which tiers it may skip.
    #[arg(long, value_enum, default_value = "medium")]
    priority: PriorityArg,
    /// Listen to this work context only (repeatable).
    #[arg(long)]
    work_context: Vec<String>,
    /// Listen to this session only (repeatable).
    #[arg(long)]
    session: Vec<String>,
    /// The tier-2 threshold (default 0.15).
    #[arg(long)]
    threshold: Option<f32>,
    /// Draw from this source class only (repeatable; every class when
    /// absent).
    #[arg(long, value_enum)]
    source: Vec<SourceArg>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl SpecArgs {
    fn spec(&self) -> TopicSpec {
        let mut spec = TopicSpec::new(&self.name, &self.description);
        spec.triggers
            .extend(self.keyword.iter().cloned().map(Trigger::Keyword));
        spec.triggers
            .extend(self.phrase.iter().cloned().map(Trigger::Phrase));
        spec.triggers
            .extend(self.regex.iter().cloned().map(Trigger::Regex));
        spec.triggers
            .extend(self.subject.iter().cloned().map(Trigger::Subject));
        spec.triggers
            .extend(self.schedule.iter().cloned().map(Trigger::Schedule));
        if self.webhook {
            spec.triggers.push(Trigger::Webhook);
        }
        spec.scope = match self.scope {
            ScopeArg::Input => Scope::Input,
            ScopeArg::Output => Scope::Output,
            ScopeArg::Both => Scope::Both,
        };
        spec.activation = match self.activation {
            ActivationArg::Auto => Activation::Auto,
            ActivationArg::Gated => Activation::Gated,
            ActivationArg::Manual => Activation::Manual,
        };
        spec.priority = match self.priority {
            PriorityArg::Low => Priority::Low,
            PriorityArg::Medium => Priority::Medium,
            PriorityArg::High => Priority::High,
            PriorityArg::Critical => Priority::Critical,
        };
        spec.subscriptions.extend(
            self.work_context
                .iter()
                .cloned()
                .map(Subscription::WorkContext),
        );
        spec.subscriptions
            .extend(self.session.iter().cloned().map(Subscription::Session));
        spec.similarity_threshold = self.threshold;
        for source in &self.source {
            spec = spec.source(match source {
                SourceArg::Chat => Source::Chat,
                SourceArg::ToolOutput => Source::ToolOutput,
            });
        }
        spec
    }
}

#[derive(Debug, Args)]
pub(crate) struct JsonArg {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct NameArg {
    /// The topic.
    name: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// The topic.
    name: String,
    /// At most this many members.
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ProposalsArgs {
    /// The topic.
    name: String,
    /// Decided proposals too.
    #[arg(long)]
    all: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct TurnArgs {
    /// The topic.
    name: String,
    /// The turn, `session/seq`.
    turn: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CollectArgs {
    /// The topic.
    name: String,
    /// Only turns at or after this time (RFC 3339).
    #[arg(long)]
    since: Option<DateTime<Utc>>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct FeedArgs {
    /// The topic (it needs a `webhook` trigger).
    name: String,
    /// The text; read from standard input when absent.
    #[arg(long)]
    text: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct LogArgs {
    /// The topic.
    name: String,
    /// At most this many records.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn open(config: CairnConfig) -> Result<Cairn> {
    let dir = config.data_dir.clone();
    Cairn::open(config).with_context(|| format!("opening {}", dir.display()))
}

fn turn(text: &str) -> Result<TurnRef> {
    Ok(text.parse::<TurnRef>().map_err(cairn::CairnError::from)?)
}

fn print_json(out: &mut impl Write, value: &impl serde::Serialize) -> Result<()> {
    writeln!(out, "{}", serde_json::to_string_pretty(value)?)?;
    Ok(())
}

fn print_record(out: &mut impl Write, r: &GateRecord) -> Result<()> {
    writeln!(
        out,
        "{}  turn {}  {} at tier {} ({:?})  score {:.3} / threshold {:.3}{}  reasons: {}{}",
        r.decided_at.to_rfc3339(),
        r.turn,
        format!("{:?}", r.outcome).to_lowercase(),
        r.tier.number(),
        r.tier,
        r.score,
        r.threshold,
        r.policy_generation
            .as_deref()
            .map(|g| format!("  policy {g}"))
            .unwrap_or_default(),
        r.reasons.join(", "),
        if r.cached { "  (cached)" } else { "" },
    )?;
    Ok(())
}

/// `cairn topics accept|dismiss`.
fn decide_candidate(
    cairn: &Cairn,
    out: &mut impl Write,
    workspace: &str,
    args: &TurnArgs,
    accept: bool,
) -> Result<()> {
    let c = cairn.decide_candidate(workspace, &args.name, &turn(&args.turn)?, accept)?;
    if args.json {
        print_json(out, &c)?;
    } else if let Some(entry) = &c.entry {
        writeln!(
            out,
            "accepted {} for {} as entry {entry}",
            c.turn, args.name
        )?;
    } else {
        writeln!(out, "dismissed {} for {}", c.turn, args.name)?;
    }
    Ok(())
}

pub(crate) fn run(config: CairnConfig, workspace: &str, action: TopicsAction) -> Result<()> {
    let out = &mut std::io::stdout().lock();
    let cairn = open(config)?;
    match action {
        TopicsAction::Create(args) => {
            let topic = cairn.create_topic(workspace, &args.spec())?;
            if args.json {
                print_json(out, &topic)?;
            } else {
                writeln!(
                    out,
                    "created topic {} (generation {})",
                    topic.spec.name, topic.generation
                )?;
            }
        }
        TopicsAction::Update(args) => {
            let topic = cairn.update_topic(workspace, &args.name, &args.spec())?;
            if args.json {
                print_json(out, &topic)?;
            } else {
                writeln!(
                    out,
                    "updated topic {} (generation {})",
                    topic.spec.name, topic.generation
                )?;
            }
        }
        TopicsAction::List(args) => {
            let topics = cairn.topics(workspace)?;
            if args.json {
                print_json(out, &topics)?;
            } else {
                for t in topics {
                    writeln!(
                        out,
                        "{}  {:?} {:?} {:?}{}  gen {}  {}",
                        t.spec.name,
                        t.spec.activation,
                        t.spec.priority,
                        t.spec.scope,
                        if t.spec.paused { " (paused)" } else { "" },
                        t.generation,
                        t.spec.description
                    )?;
                }
            }
        }
        TopicsAction::Show(args) => {
            let details = cairn.topic(workspace, &args.name, args.limit, on_screen())?;
            if args.json {
                print_json(out, &details)?;
            } else {
                let t = &details.topic;
                writeln!(out, "{}: {}", t.spec.name, t.spec.description)?;
                writeln!(
                    out,
                    "  {:?}, {:?}, scope {:?}, generation {}{}",
                    t.spec.activation,
                    t.spec.priority,
                    t.spec.scope,
                    t.generation,
                    if t.spec.paused { ", paused" } else { "" }
                )?;
                writeln!(out, "collected ({}):", details.members.len())?;
                for m in &details.members {
                    writeln!(out, "  {}  tier {}  {}", m.turn, m.tier.number(), m.snippet)?;
                }
                writeln!(out, "pending proposals ({}):", details.pending.len())?;
                for p in &details.pending {
                    writeln!(out, "  {}  {}", p.membership.turn, p.membership.snippet)?;
                }
                if !details.evidence.is_empty() {
                    writeln!(out, "evidence ({}):", details.evidence.len())?;
                    for e in &details.evidence {
                        writeln!(
                            out,
                            "  {}  \"{}\"  (decision {})",
                            e.turn, e.quote, e.gate_record
                        )?;
                    }
                }
                if !details.candidates.is_empty() {
                    writeln!(out, "assertion candidates ({}):", details.candidates.len())?;
                    for c in &details.candidates {
                        writeln!(out, "  {}  {}", c.turn, c.text)?;
                    }
                }
            }
        }
        TopicsAction::Pause(args) => {
            let t = cairn.pause_topic(workspace, &args.name, true)?;
            writeln!(out, "paused {} (generation {})", t.spec.name, t.generation)?;
        }
        TopicsAction::Resume(args) => {
            let t = cairn.pause_topic(workspace, &args.name, false)?;
            writeln!(out, "resumed {} (generation {})", t.spec.name, t.generation)?;
        }
        TopicsAction::Delete(args) => {
            let t = cairn.delete_topic(workspace, &args.name)?;
            writeln!(out, "deleted {}", t.spec.name)?;
        }
        TopicsAction::Proposals(args) => {
            let proposals = cairn.topic_proposals(workspace, &args.name, args.all, on_screen())?;
            if args.json {
                print_json(out, &proposals)?;
            } else {
                for p in proposals {
                    writeln!(
                        out,
                        "{}  {:?}  {}",
                        p.membership.turn, p.status, p.membership.snippet
                    )?;
                }
            }
        }
        TopicsAction::Approve(args) => {
            let p = cairn.decide_proposal(workspace, &args.name, &turn(&args.turn)?, true)?;
            writeln!(out, "approved {} for {}", p.membership.turn, args.name)?;
        }
        TopicsAction::Reject(args) => {
            let p = cairn.decide_proposal(workspace, &args.name, &turn(&args.turn)?, false)?;
            writeln!(out, "rejected {} for {}", p.membership.turn, args.name)?;
        }
        TopicsAction::Candidates(args) => {
            let candidates =
                cairn.topic_candidates(workspace, &args.name, args.all, on_screen())?;
            if args.json {
                print_json(out, &candidates)?;
            } else {
                for c in candidates {
                    writeln!(out, "{}  {:?}  {}", c.turn, c.status, c.text)?;
                }
            }
        }
        TopicsAction::Accept(args) => decide_candidate(&cairn, out, workspace, &args, true)?,
        TopicsAction::Dismiss(args) => decide_candidate(&cairn, out, workspace, &args, false)?,
        TopicsAction::Collect(args) => {
            let report = cairn.collect_topic(workspace, &args.name, args.since)?;
            if args.json {
                print_json(out, &report)?;
            } else {
                writeln!(
                    out,
                    "scanned {} turns: {} matched, {} collected, {} proposed, {} already members",
                    report.scanned,
                    report.matched,
                    report.collected,
                    report.proposed,
                    report.already
                )?;
            }
        }
        TopicsAction::Feed(args) => {
            let text = match args.text {
                Some(text) => text,
                None => {
                    let mut text = String::new();
                    std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
                    text
                }
            };
            let report = cairn.feed_topic(workspace, &args.name, &text)?;
            if args.json {
                print_json(out, &report)?;
            } else {
                let outcome = report
                    .outcome
                    .map_or("not judged".to_owned(), |o| format!("{o:?}").to_lowercase());
                writeln!(out, "recorded as {}: {outcome}", report.turn)?;
            }
        }
        TopicsAction::Schedules(args) => {
            let runs = cairn.run_topic_schedules(workspace)?;
            if args.json {
                print_json(out, &runs)?;
            } else if runs.is_empty() {
                writeln!(out, "no topic schedule is due")?;
            } else {
                for run in &runs {
                    writeln!(
                        out,
                        "{}: since {}, {} collected, {} proposed",
                        run.topic,
                        run.since.to_rfc3339(),
                        run.report.collected,
                        run.report.proposed
                    )?;
                }
            }
        }
        TopicsAction::Why(args) => {
            let records = cairn.why(workspace, &args.name, &turn(&args.turn)?, on_screen())?;
            if args.json {
                print_json(out, &records)?;
            } else if records.is_empty() {
                writeln!(
                    out,
                    "turn {} never reached {}'s gate: no pattern matched, or it is out of the topic's scope or subscriptions",
                    args.turn, args.name
                )?;
            } else {
                for r in &records {
                    print_record(out, r)?;
                }
            }
        }
        TopicsAction::Log(args) => {
            let records = cairn.gate_log(workspace, &args.name, args.limit, on_screen())?;
            if args.json {
                print_json(out, &records)?;
            } else {
                for r in &records {
                    print_record(out, r)?;
                }
            }
        }
    }
    cairn.flush()?;
    Ok(())
}

/// Topic reads shown on the operator's terminal: the memory policy judges
/// each collected turn for `user_visible_ui`.
fn on_screen() -> ReadAs<'static> {
    ReadAs::user().to(Destination::UserVisibleUi)
}
