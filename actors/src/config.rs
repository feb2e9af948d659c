//! Configuration of the actor runtime: mailboxes, passivation, triggers.
//!
//! Every timing is configurable; defaults follow docs/DESIGN.md, *Triggers*
//! (3 user turns, idle 15 minutes, debounce 30 minutes).

use serde::{Deserialize, Serialize};

/// What the host gets when an actor's mailbox is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backpressure {
    /// Refuse at once with [`crate::ActorError::Backpressure`] (the default:
    /// the host decides whether to retry, shed or slow down).
    #[default]
    Reject,
    /// Wait for room up to `wait_millis`, then refuse.
    Wait,
}

/// When captures fire (docs/DESIGN.md, *Triggers and dirty tracking*).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TriggerConfig {
    /// User turns since the last capture that make a work context dirty.
    pub min_dirty_user_turns: usize,
    /// Idle trigger: the focused, dirty context fires after this many minutes
    /// without a turn in the workspace.
    pub idle_minutes: i64,
    /// Debounced defocus: a dirty context the user moved away from fires this
    /// many minutes after its uncaptured material began (or after its last
    /// capture, whichever is later).
    pub defocus_debounce_minutes: i64,
    /// Nightly sweep time, `HH:MM` in UTC; `"off"` (or absent) disables it.
    pub nightly_at_utc: Option<String>,
    /// Extract sub-agent and cron sessions too (main sessions only by default).
    pub extract_all_sessions: bool,
    /// A capture writes no `cross_conversation_update` about a subject into
    /// a work context that already holds a live one about it from the last
    /// this many minutes: one notice per subject and context per period, not
    /// one per span (docs/DESIGN.md, *Cross-conversation updates*). 0 writes
    /// one for every span that mentions the subject.
    pub cross_update_quiet_minutes: i64,
}

impl Default for TriggerConfig {
    fn default() -> Self {
        TriggerConfig {
            min_dirty_user_turns: 3,
            idle_minutes: 15,
            defocus_debounce_minutes: 30,
            nightly_at_utc: Some("03:00".to_owned()),
            extract_all_sessions: false,
            cross_update_quiet_minutes: 60,
        }
    }
}

impl TriggerConfig {
    /// The nightly time as (hour, minute), if enabled and well-formed.
    pub fn nightly(&self) -> Option<(u32, u32)> {
        let text = self.nightly_at_utc.as_deref()?;
        if text == "off" {
            return None;
        }
        let (h, m) = text.split_once(':')?;
        let (h, m) = (h.parse().ok()?, m.parse().ok()?);
        (h < 24 && m < 60).then_some((h, m))
    }
}

/// The longest `cross_update_quiet_minutes`: a cross-conversation update
/// lives 7 days, so a longer quiet period would mean the same.
pub(crate) const MAX_CROSS_UPDATE_QUIET_MINUTES: i64 = 7 * 24 * 60;

/// The actor runtime's configuration.
///
/// ```
/// let config = cairn_actors::ActorConfig::default();
/// assert_eq!(config.triggers.idle_minutes, 15);
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ActorConfig {
    /// Arbiter threads actors are spread over (by hash of their key).
    pub arbiters: usize,
    /// Mailbox capacity of each actor.
    pub mailbox_capacity: usize,
    /// What happens when a mailbox is full.
    pub backpressure: Backpressure,
    /// With `backpressure = "wait"`: how long to wait for room.
    pub wait_millis: u64,
    /// How long a caller waits for an actor's answer.
    pub call_timeout_millis: u64,
    /// Actors idle this long (by the clock) are passivated on the next tick;
    /// dirty work contexts stay live until captured.
    pub passivate_after_secs: i64,
    /// Real-time period of the trigger ticker; 0 disables the ticker (tests
    /// and embedders then call `tick` themselves).
    pub tick_interval_secs: u64,
    /// Capture triggers.
    pub triggers: TriggerConfig,
}

impl Default for ActorConfig {
    fn default() -> Self {
        ActorConfig {
            arbiters: 2,
            mailbox_capacity: 256,
            backpressure: Backpressure::Reject,
            wait_millis: 5_000,
            call_timeout_millis: 30_000,
            passivate_after_secs: 600,
            tick_interval_secs: 30,
            triggers: TriggerConfig::default(),
        }
    }
}

impl ActorConfig {
    /// Checks the values; the message names the offending key.
    pub fn validate(&self) -> Result<(), String> {
        if self.arbiters == 0 || self.arbiters > 256 {
            return Err("actors.arbiters must be between 1 and 256".to_owned());
        }
        if self.mailbox_capacity == 0 {
            return Err("actors.mailbox_capacity must be greater than zero".to_owned());
        }
        if self.call_timeout_millis == 0 {
            return Err("actors.call_timeout_millis must be greater than zero".to_owned());
        }
        if self.passivate_after_secs <= 0 {
            return Err("actors.passivate_after_secs must be greater than zero".to_owned());
        }
        let t = &self.triggers;
        if t.min_dirty_user_turns == 0 || t.idle_minutes <= 0 || t.defocus_debounce_minutes <= 0 {
            return Err(
                "actors.triggers: min_dirty_user_turns, idle_minutes and defocus_debounce_minutes must be greater than zero"
                    .to_owned(),
            );
        }
        if !(0..=MAX_CROSS_UPDATE_QUIET_MINUTES).contains(&t.cross_update_quiet_minutes) {
            return Err(format!(
                "actors.triggers.cross_update_quiet_minutes must be between 0 and {MAX_CROSS_UPDATE_QUIET_MINUTES} (an update's 7-day life; got {})",
                t.cross_update_quiet_minutes
            ));
        }
        if t.nightly_at_utc.as_deref().is_some_and(|n| n != "off") && t.nightly().is_none() {
            return Err(format!(
                "actors.triggers.nightly_at_utc {:?} must be HH:MM (UTC)",
                t.nightly_at_utc
            ));
        }
        Ok(())
    }
}
