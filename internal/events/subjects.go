package events

// The contract's subjects, types and routes are package contract's; these
// are the service's own.

// LegacyDLQPrefix is the dead letters' prefix before it moved to
// contract.DLQPrefix (version 0.4); the DLQ stream's subjects are
// migrated at provisioning.
const LegacyDLQPrefix = "compaction.dlq."

// IngestPrefix: a tenant's request events reach the service account on
// tenant.<account>.compactor.request.<request subject> (its import maps
// agent.context.> there), and the service stores them in AGENT_CONTEXT
// under tenant.<account>.<request subject>, with the tenant's own
// deduplication id (see consumer.Ingest).
const IngestPrefix = "compactor.request."
