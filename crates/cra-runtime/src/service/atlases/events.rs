//! The operator audit chain's atlas events (issue 22 B.12): every install, replacement, removal
//! and refusal of an atlas, with the atlas's id, version and digest, who did it and through
//! which door.

use cra_trace::Payload;
use serde::Serialize;

/// Through which door an atlas change came.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AtlasSource {
    /// `POST /v1/atlases`: one atlas installed.
    Install,
    /// `PUT /v1/atlases`: the whole set replaced.
    ReplaceSet,
    /// `--watch`: the configured sources reloaded after their files changed.
    Watch,
    /// A server's start: its directory atlases loaded into the stored set.
    Start,
    /// Changes a crash left stored but unrecorded (several, or of unknown origin), recorded by
    /// the next start as one change from the last recorded set.
    Recovered,
}

/// The atlas an event is about, and who changed it how.
#[derive(Debug, Serialize)]
pub(crate) struct AtlasChange<'a> {
    /// Reverse-DNS id.
    pub atlas_id: &'a str,
    /// Semver.
    pub version: &'a str,
    /// The atlas digest.
    pub digest: &'a str,
    /// The authenticated actor (the runtime's own agent for `watch`).
    pub actor: &'a str,
    /// The door.
    pub source: AtlasSource,
}

/// `atlas.installed`: an atlas id not in force before now is.
#[derive(Debug, Serialize)]
pub(crate) struct AtlasInstalled<'a>(pub AtlasChange<'a>);

impl Payload for AtlasInstalled<'_> {
    const EVENT_TYPE: &'static str = "atlas.installed";
}

/// `atlas.replaced`: the atlas with this id is now another version or content.
#[derive(Debug, Serialize)]
pub(crate) struct AtlasReplaced<'a> {
    /// The atlas now in force.
    #[serde(flatten)]
    pub atlas: AtlasChange<'a>,
    /// The version it replaced.
    pub replaced_version: &'a str,
    /// The digest it replaced.
    pub replaced_digest: &'a str,
}

impl Payload for AtlasReplaced<'_> {
    const EVENT_TYPE: &'static str = "atlas.replaced";
}

/// `atlas.removed`: the atlas is no longer in force (a set replaced without it, or a source
/// that no longer holds it).
#[derive(Debug, Serialize)]
pub(crate) struct AtlasRemoved<'a>(pub AtlasChange<'a>);

impl Payload for AtlasRemoved<'_> {
    const EVENT_TYPE: &'static str = "atlas.removed";
}

/// `atlas.refused`: a change that was refused; nothing changed. The atlas's id, version and
/// digest when it loaded far enough to have them.
#[derive(Debug, Serialize)]
pub(crate) struct AtlasRefused<'a> {
    /// The refused atlas's id, if known.
    pub atlas_id: Option<&'a str>,
    /// Its version, if known.
    pub version: Option<&'a str>,
    /// Its digest, if known.
    pub digest: Option<&'a str>,
    /// Who asked.
    pub actor: &'a str,
    /// The door.
    pub source: AtlasSource,
    /// The refusal's token.
    pub error: &'a str,
    /// Its message.
    pub message: &'a str,
}

impl Payload for AtlasRefused<'_> {
    const EVENT_TYPE: &'static str = "atlas.refused";
}
