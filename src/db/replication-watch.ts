// The primary's replication, read on a timer off the request path: which standbys stream from it and whether
// a commit waits for one of them. With standbys attached and none synchronous, a failover forgets the claims
// of its last moments and those proofs serve again (docs/failover.md): reported, and refused if required.

import type { ReadinessCheck } from '../observability/admin.ts'
import type { Logger } from '../observability/logger.ts'
import { replicationUnsafe, standbysBySyncState } from '../observability/metrics.ts'
import type { Sql } from './sql.ts'

/** pg_stat_replication.sync_state, and 'unknown' when the role may not read it (no pg_read_all_stats). */
export const SYNC_STATES = ['sync', 'quorum', 'potential', 'async', 'unknown'] as const
export type SyncState = (typeof SYNC_STATES)[number]

export interface ReplicationReading {
  /** As tollgate's own sessions see it: the role's and database's settings apply, not only the server's. */
  synchronousCommit: string
  synchronousStandbyNames: string
  /** Physical standbys streaming from this server (base backups and logical walsenders left out). */
  standbys: Array<{ name: string; syncState: SyncState }>
}

export type ReplicationState =
  /** The embedded database, or a server not read yet (or never readable): nothing to judge. */
  | { kind: 'no_replication' | 'unread'; detail: string }
  /** No standby attached. A failover has nowhere to go, so none can forget claims; a restore from backup would. */
  | { kind: 'no_standby'; detail: string }
  | { kind: 'safe'; detail: string }
  | { kind: 'unsafe'; reason: UnsafeReason; detail: string }

export type UnsafeReason = 'asynchronous_standbys' | 'weak_synchronous_commit' | 'standby_state_hidden'

/** Commits that do not wait for any standby, whatever synchronous_standby_names says. */
const WEAK_COMMIT = new Set(['off', 'local'])

/** What the reading means for "a proof never serves twice after a failover" (pure: unit-tested). */
export function judgeReplication(r: ReplicationReading): ReplicationState {
  const count = countBySyncState(r.standbys)
  const names = r.standbys.map((s) => `${s.name} (${s.syncState})`).join(', ')
  if (r.standbys.length === 0) {
    // synchronous_standby_names set with nobody to wait for: every commit waits, paid calls stall (not lost).
    const waits = r.synchronousStandbyNames !== '' && !WEAK_COMMIT.has(r.synchronousCommit)
    return {
      kind: 'no_standby',
      detail: waits
        ? `no standby attached, and synchronous_standby_names = '${r.synchronousStandbyNames}': commits wait for one`
        : 'no standby attached: nothing a failover could forget (a restore from backup is another matter)',
    }
  }
  if (count.sync + count.quorum > 0) {
    if (WEAK_COMMIT.has(r.synchronousCommit))
      return {
        kind: 'unsafe',
        reason: 'weak_synchronous_commit',
        detail: `synchronous_commit = ${r.synchronousCommit}: commits do not wait for the synchronous standby (${names}); a failover forgets the last claims`,
      }
    return { kind: 'safe', detail: `synchronous standby: ${names}` }
  }
  if (count.unknown > 0)
    return {
      kind: 'unsafe',
      reason: 'standby_state_hidden',
      detail: `${r.standbys.length} standby(s) attached, sync state not readable by this role: GRANT pg_read_all_stats (or pg_monitor) to it`,
    }
  return {
    kind: 'unsafe',
    reason: 'asynchronous_standbys',
    detail: `standby attached but none synchronous: ${names}; after a failover the last claims are forgotten and those proofs serve again (set synchronous_standby_names)`,
  }
}

export function countBySyncState(standbys: ReplicationReading['standbys']): Record<SyncState, number> {
  const count = { sync: 0, quorum: 0, potential: 0, async: 0, unknown: 0 }
  for (const s of standbys) count[s.syncState]++
  return count
}

/** One query on the primary; costs a catalog read. */
export async function readReplication(sql: Sql): Promise<ReplicationReading> {
  const [row] = await sql<
    {
      synchronous_commit: string
      names: string
      standbys: Array<{ name: string; sync_state: string | null }>
    }[]
  >`
    SELECT current_setting('synchronous_commit') AS synchronous_commit,
           current_setting('synchronous_standby_names') AS names,
           coalesce((
             SELECT json_agg(json_build_object('name', r.application_name, 'sync_state', r.sync_state))
             FROM pg_stat_replication r
             -- A base backup in progress streams too (state 'backup'), and a logical walsender (a CDC
             -- consumer) holds a logical slot: neither is a standby a failover could promote.
             WHERE r.state IS DISTINCT FROM 'backup'
               AND NOT EXISTS (SELECT 1 FROM pg_replication_slots s
                               WHERE s.active_pid = r.pid AND s.slot_type = 'logical')
           ), '[]'::json) AS standbys`
  return {
    synchronousCommit: row!.synchronous_commit,
    synchronousStandbyNames: row!.names.trim(),
    standbys: row!.standbys.map((s) => ({
      name: s.name,
      syncState: (SYNC_STATES as readonly string[]).includes(s.sync_state ?? '')
        ? (s.sync_state as SyncState)
        : 'unknown',
    })),
  }
}

export interface ReplicationWatch {
  readonly state: ReplicationState
  /** Read synchronously by every paid call: the reason paid calls are refused, or null. */
  readonly refusing: string | null
  readonly readiness: ReadinessCheck
  /** Reads the state now (tests; the first read at start). */
  refresh(): Promise<void>
  stop(): void
}

export async function startReplicationWatch(deps: {
  sql: Sql
  logger: Logger
  embedded: boolean
  /** database.require_synchronous_standby: refuse paid calls while the state is unsafe. */
  require: boolean
  checkMs: number
}): Promise<ReplicationWatch> {
  const { logger } = deps
  let state: ReplicationState = deps.embedded
    ? { kind: 'no_replication', detail: 'embedded database: no replication' }
    : { kind: 'unread', detail: 'replication not read yet' }
  const publish = (next: ReplicationState, atStart: boolean) => {
    const was = state
    state = next
    replicationUnsafe.set(next.kind === 'unsafe' ? 1 : 0)
    if (next.kind === 'unsafe' && (atStart || was.kind !== 'unsafe' || was.reason !== next.reason))
      logger.warn(
        deps.require
          ? 'replication unsafe: paid calls refused'
          : 'replication unsafe: a failover serves twice',
        { reason: next.reason, detail: next.detail, require_synchronous_standby: deps.require },
      )
    else if (next.kind !== 'unsafe' && was.kind === 'unsafe')
      logger.warn('replication safe again', { state: next.kind, detail: next.detail })
  }
  let reading: Promise<void> | null = null
  let failing = false
  const refresh = (atStart = false): Promise<void> => {
    reading ??= readReplication(deps.sql)
      .then(
        (r) => {
          failing = false
          const count = countBySyncState(r.standbys)
          for (const s of SYNC_STATES) standbysBySyncState.set({ sync_state: s }, count[s])
          publish(judgeReplication(r), atStart)
        },
        // The database away: keep the last state (its outage answers 503 on its own); said once per outage.
        (err) => {
          if (!failing) logger.warn('replication state not read', { err })
          failing = true
        },
      )
      .finally(() => {
        reading = null
      })
    return reading
  }
  if (deps.embedded) {
    // Nothing to read, nothing to time: the gauges say so once.
    for (const s of SYNC_STATES) standbysBySyncState.set({ sync_state: s }, 0)
    replicationUnsafe.set(0)
  } else {
    await refresh(true)
  }
  const timer = deps.embedded ? null : setInterval(() => void refresh(), deps.checkMs)
  timer?.unref()
  return {
    get state() {
      return state
    },
    get refusing() {
      // Required and not known to be safe (not read yet: the first read at start failed): refused too.
      if (!deps.require) return null
      return state.kind === 'unsafe' || state.kind === 'unread' ? state.detail : null
    },
    readiness: {
      name: 'replication',
      // Degraded, not failing: /readyz stays 200, or a load balancer would take every instance out, the
      // free routes and the API with them. The paid calls' own 503 is the refusal.
      check: async () =>
        state.kind === 'unsafe' || (deps.require && state.kind === 'unread')
          ? {
              ok: true,
              degraded: true,
              detail: `${state.kind === 'unsafe' ? state.reason : 'unread'}: ${state.detail}${deps.require ? ' (paid calls refused: database.require_synchronous_standby)' : ''}`,
            }
          : { ok: true, detail: state.detail },
    },
    refresh: () => refresh(),
    stop: () => {
      if (timer !== null) clearInterval(timer)
    },
  }
}
