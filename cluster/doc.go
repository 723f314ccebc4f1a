// Package cluster runs a Tandem collection over several nodes: sharded by
// document id, each shard replicated by a Raft group (hashicorp/raft), and
// searched from any node as if it were one engine.
//
// # Replication
//
// A node runs one Raft group per shard replica it holds, plus a metadata
// group of every node that replicates the collections' specs and shard
// placement (CollectionSpec). All groups share one TCP listener; each
// connection names its group first. Raft's logs and stable state live in
// one Badger database per node (raftStore), synced on every append.
//
// A shard's log entries are write batches. The node that accepts a write
// checks the documents and computes their vectors once
// (engine.Engine.Prepare), so every replica stores the same vectors and
// none runs an encoder for it; the entry carries documents and blobs. A
// write is acknowledged when Raft has committed its entry on a majority of
// the shard's replicas and the leader has applied it.
//
// Invariants:
//
//   - A document's shard is ShardOf(id, shards), fixed at creation, so an
//     upsert or a delete always goes where the document is.
//   - Every replica applies its group's committed entries in log order
//     through the engine's batch path (engine.Shard.Write), and records
//     the entry's Raft index in the same Badger transaction (a storage
//     mark). After a crash Raft replays its log from its last snapshot and
//     the replica skips every entry at or below its mark: nothing is
//     applied twice and nothing skipped. Replicas of a shard hold the same
//     documents under the same document numbers.
//   - An entry the engine refuses (a document the schema refuses, a batch
//     too large) is refused alike on every replica, which records only its
//     mark; the writer gets the error. Any other failure to apply (a full
//     disk) takes the replica out of service instead of letting it skip
//     the entry: its group goes on without it, and a restart applies the
//     entry again.
//   - Raft snapshots are backups of the shard's store read in one
//     transaction (storage.Store.Backup); a replica too far behind for the
//     log restores one and rebuilds its derived indexes from it. Raft
//     persists a snapshot it receives before the replica restores it,
//     and on a restart counts it as applied: so a snapshot records the
//     applied mark it reaches, and a replica whose mark is lower restores
//     it when it opens. A restore swaps directories by renames that an
//     interrupted one finishes or undoes on the next open.
//   - A collection's schema is strict: a shard cannot infer a new field the
//     way every other shard would.
//
// # Membership
//
// The metadata group records the cluster's nodes, the collections with
// their placement, and at most one move of a shard replica in progress
// (meta.go). A node started with Config.Join asks a member to add it;
// the metadata leader adds every recorded node to the metadata group, as
// a non-voter until it has caught up, and moves replicas by the
// placement rule (planMove): for each collection, every node that is not
// draining holds the floor or the ceiling of the mean number of its
// replicas, a draining node none, and no node two replicas of one shard.
// A move adds the new replica to the shard's group as a non-voter, which
// Raft fills from a snapshot and the log; once it has applied as far as
// the leader had a step (100 ms) before, it becomes a voter and replaces
// the old one in the placement; once it has applied as far as the leader
// had at that switch, the old replica leaves the group (the lead handed
// over first if it held it), then closes and deletes its files. A
// drained node that holds nothing leaves the metadata group. Dropping a
// collection deletes it on every node; its UID keeps a directory a
// dropped collection left from being taken for a new one of the same
// name. A replica that fails to open is tried again every step.
//
// Invariants:
//
//   - A shard's group never loses a voter before its replacement has
//     applied every entry the group had committed when the placement
//     switched; a write acknowledged before, during or after a move is
//     on a majority of the voters at every moment.
//   - A node reconciles its replicas with the metadata only once it has
//     applied the metadata log it found on starting, so a replay never
//     deletes a replica that a later entry gives back to it.
//   - Every step of a move is idempotent and recorded in the metadata: a
//     new metadata leader, or a node restarted mid-move, takes the move up
//     where it stands. The leader acts only after a barrier (on the state
//     as of everything committed), a replica joins a group only once its
//     node has applied the move (and every move before it), and the old
//     replica is removed only from the configuration the switch made, so
//     a deposed leader's late step changes nothing.
//   - Every node's metadata state starts from the same founding nodes
//     (the first nodes' peers, kept in each node's Dir, and given to a
//     joining node): the state is a function of the log alone.
//   - A member that joins again (restored from a node backup, without
//     Raft state) is a non-voter in every group before it starts any,
//     and votes again only once it has caught up (nodebackup.go).
//   - Raft state of a removed replica or a dropped collection is deleted
//     before its files, so a crash between the two never leaves Raft
//     state for a later replica of the same name to take up.
//
// # Search
//
// Any node coordinates a search (Node.Search), in the phases the engine's
// shard API describes: the query is encoded once, on the coordinator; BM25
// scores with the whole collection's statistics, summed from every
// shard's; late interaction chooses its candidates over every shard's
// token collection; each retriever's per-shard lists are merged into one
// list, cut to the retriever's depth, before fusion; the page's documents
// are fetched from their shards. Facets are counted by the shards, each
// over its own documents, and their counts added (engine.FacetCounts):
// for the filter scope every shard counts what the filter matches; for
// the results scope every shard counts its documents of the fused
// window, and a disjunctive facet whose field the filter constrains has
// its window ranked again, over every shard, under the reduced filter.
// Counts are exact, never cut per shard, so they equal one engine's
// whenever the windows hold the same documents (TestEquivalence). With exact indexes (flat dense and token
// indexes, which the automatic choice makes below 10,000 vectors and
// 100,000 tokens per shard) a sharded collection ranks exactly as one
// engine holding the same documents; ties at equal scores are broken by
// document id, where one engine breaks them by document number.
// Approximate indexes (IVF, residual codes) approximate per shard.
//
// Each shard is read from this node's replica when it holds one, else from
// another replica over HTTP. A read waits for the replicas it reads to
// have applied as far as each shard's leader had when the read began, so
// it sees every write acknowledged before (unless leadership moved
// meanwhile); given a Position (a write's WriteResult.Position) it waits
// for that instead, and SearchOptions.Stale reads replicas as they are.
//
// # Security
//
// Nodes trust each other: a /_cluster/ route applies log entries,
// creates collections and reads any shard, and a Raft connection takes
// entries. So a cluster with Credentials (a cluster key, or certificates
// of the operator's CA) speaks TLS 1.3 with a certificate on both sides
// for all traffic between nodes:
//
//   - the Raft listener completes a TLS handshake that authenticates the
//     peer before it reads the connection's group;
//   - the HTTP listener serves clients in plain HTTP and nodes in TLS,
//     told apart by a connection's first byte; the /_cluster/ routes
//     answer only a request that came over TLS from an authenticated peer,
//     and 401 to any other;
//   - every refusal is logged and counted (Node.Collectors:
//     tandem_cluster_refused_total).
//
// An unprotected node refuses to start unless its Raft and HTTP addresses
// are loopback (CheckExposure). Clients' API keys are the server's
// business (package server) and open no /_cluster/ route; the cluster's
// status is served to an operator through the server, behind its admin
// key.
//
// Catalog and Collection give the HTTP server (package server) a
// cluster's collections behind the same API as one node's; Serve runs a
// node that serves that API on its HTTP listener, as tandem serve
// --cluster does.
package cluster
