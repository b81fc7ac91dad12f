import { describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config/load.ts'
import { judgeReplication, type ReplicationReading } from '../../src/db/replication-watch.ts'

const reading = (over: Partial<ReplicationReading>): ReplicationReading => ({
  synchronousCommit: 'on',
  synchronousStandbyNames: '',
  standbys: [],
  ...over,
})

describe('judging the primary replication', () => {
  it('an asynchronous standby is unsafe: a failover forgets the last claims', () => {
    const s = judgeReplication(reading({ standbys: [{ name: 'standby1', syncState: 'async' }] }))
    expect(s).toMatchObject({ kind: 'unsafe', reason: 'asynchronous_standbys' })
    expect(s.detail).toContain('standby1 (async)')
  })

  it('one synchronous standby beside asynchronous ones is safe, in priority or quorum mode', () => {
    for (const syncState of ['sync', 'quorum'] as const) {
      const s = judgeReplication(
        reading({
          synchronousStandbyNames: 'ANY 1 (s1, s2)',
          standbys: [
            { name: 's1', syncState },
            { name: 's2', syncState: 'async' },
          ],
        }),
      )
      expect(s.kind, syncState).toBe('safe')
    }
  })

  it('a synchronous standby with synchronous_commit off or local is unsafe; remote_write is not', () => {
    const standbys = [{ name: 's1', syncState: 'sync' as const }]
    for (const commit of ['off', 'local'])
      expect(judgeReplication(reading({ synchronousCommit: commit, standbys }))).toMatchObject({
        kind: 'unsafe',
        reason: 'weak_synchronous_commit',
      })
    for (const commit of ['on', 'remote_write', 'remote_apply'])
      expect(judgeReplication(reading({ synchronousCommit: commit, standbys })).kind, commit).toBe('safe')
  })

  it('standbys whose state the role may not read are unsafe, naming the grant', () => {
    const s = judgeReplication(reading({ standbys: [{ name: '', syncState: 'unknown' }] }))
    expect(s).toMatchObject({ kind: 'unsafe', reason: 'standby_state_hidden' })
    expect(s.detail).toContain('pg_read_all_stats')
  })

  it('no standby at all is not the failover-twice case; it says when commits wait for a missing one', () => {
    expect(judgeReplication(reading({})).kind).toBe('no_standby')
    const waiting = judgeReplication(reading({ synchronousStandbyNames: 'standby1' }))
    expect(waiting.kind).toBe('no_standby')
    expect(waiting.detail).toContain('commits wait')
  })
})

describe('database.require_synchronous_standby', () => {
  it('is off by default, read from REQUIRE_SYNCHRONOUS_STANDBY, and refuses a non-boolean', () => {
    const c = loadConfig({ env: {} })
    expect(c.database.require_synchronous_standby).toBe(false)
    expect(c.database.replication_check_ms).toBe(10_000)
    expect(
      loadConfig({ env: { REQUIRE_SYNCHRONOUS_STANDBY: 'true' } }).database.require_synchronous_standby,
    ).toBe(true)
    // A value the environment cannot parse as a boolean reaches the schema as a string, and is named.
    expect(() => loadConfig({ env: { REQUIRE_SYNCHRONOUS_STANDBY: 'maybe' } })).toThrow(
      /database\.require_synchronous_standby/,
    )
    expect(() => loadConfig({ env: {}, overrides: { database: { replication_check_ms: 0 } } })).toThrow(
      /database\.replication_check_ms/,
    )
  })
})
