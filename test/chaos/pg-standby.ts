// A streaming standby of a private cluster (pg-cluster.ts), for failover tests: pg_basebackup -R from the
// primary into its own directory and port, started in hot standby, promoted on demand. Replication is
// asynchronous until `makeSynchronous` names this standby in the primary's synchronous_standby_names.
import { execFileSync } from 'node:child_process'
import { chmodSync, chownSync, mkdtempSync, rmSync } from 'node:fs'
import { appendFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import postgres from 'postgres'
import { binDir, freePort, type PgCluster, pgBin } from './pg-cluster.ts'

export type ReplicationMode = 'async' | 'sync-on' | 'sync-remote-apply'

export interface PgStandby {
  url: string
  port: number
  /** The name the primary knows it by (application_name in its primary_conninfo). */
  name: string
  /** `pg_ctl promote -w`: out of recovery, accepting writes on a new timeline. */
  promote(): Promise<void>
  stop(mode?: 'fast' | 'immediate'): Promise<void>
  start(): Promise<void>
  /** Stops it and deletes its directory. */
  destroy(): Promise<void>
}

const isRoot = process.getuid?.() === 0

export async function startStandby(primary: PgCluster, name = 'standby1'): Promise<PgStandby> {
  const bin = binDir()
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-pg-standby-'))
  const data = join(dir, 'data')
  if (isRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim())
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim())
    chownSync(dir, uid, gid)
  }
  chmodSync(dir, 0o700)
  const conninfo = `host=127.0.0.1 port=${primary.port} user=postgres application_name=${name}`
  // -R writes standby.signal and primary_conninfo; -X stream keeps the WAL made during the copy.
  await pgBin(bin, 'pg_basebackup', ['-D', data, '-R', '-X', 'stream', '-c', 'fast', '-d', conninfo])
  // The line -R wrote may lack application_name, which synchronous_standby_names matches on: the last
  // setting in postgresql.auto.conf wins.
  await appendFile(join(data, 'postgresql.auto.conf'), `primary_conninfo = '${conninfo}'\n`)
  const port = await freePort()
  const serverOptions = [
    `-p ${port}`,
    '-c listen_addresses=127.0.0.1',
    `-c unix_socket_directories=${dir}`,
    '-c max_connections=200',
    '-c shared_buffers=32MB',
  ].join(' ')
  const log = join(dir, 'server.log')
  const start = async () => {
    await pgBin(bin, 'pg_ctl', ['-D', data, '-l', log, '-o', serverOptions, '-w', '-t', '60', 'start'])
  }
  await start()
  let destroyed = false
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    name,
    start,
    async stop(mode = 'fast') {
      await pgBin(bin, 'pg_ctl', ['-D', data, '-m', mode, '-w', '-t', '60', 'stop'])
    },
    async promote() {
      await pgBin(bin, 'pg_ctl', ['-D', data, '-w', '-t', '60', 'promote'])
    },
    async destroy() {
      if (destroyed) return
      destroyed = true
      await pgBin(bin, 'pg_ctl', ['-D', data, '-m', 'immediate', '-w', '-t', '60', 'stop']).catch(() => {})
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/**
 * Sets the primary's replication mode (ALTER SYSTEM + reload, no restart). Done after the base backup on
 * purpose: a standby copied with synchronous_standby_names set would, once promoted and alone, wait forever
 * for a standby of its own on every commit.
 */
export async function setReplicationMode(
  primary: PgCluster,
  standby: PgStandby,
  mode: ReplicationMode,
): Promise<void> {
  const db = postgres(primary.url, { max: 1, onnotice: () => {} })
  try {
    if (mode === 'async') {
      await db`ALTER SYSTEM RESET synchronous_standby_names`
      await db`ALTER SYSTEM RESET synchronous_commit`
    } else {
      await db.unsafe(`ALTER SYSTEM SET synchronous_standby_names = '${standby.name}'`)
      await db.unsafe(`ALTER SYSTEM SET synchronous_commit = '${mode === 'sync-on' ? 'on' : 'remote_apply'}'`)
    }
    await db`SELECT pg_reload_conf()`
  } finally {
    await db.end({ timeout: 1 })
  }
}

/** Waits until the primary sees the standby streaming (and, when synchronous, as its sync standby). */
export async function waitForStreaming(primary: PgCluster, standby: PgStandby, sync: boolean): Promise<void> {
  const db = postgres(primary.url, { max: 1, onnotice: () => {} })
  try {
    const deadline = Date.now() + 30_000
    for (;;) {
      const rows = await db<{ state: string; sync_state: string }[]>`
        SELECT state, sync_state FROM pg_stat_replication WHERE application_name = ${standby.name}`
      const r = rows[0]
      if (r?.state === 'streaming' && (!sync || r.sync_state === 'sync')) return
      if (Date.now() > deadline) throw new Error(`standby not streaming: ${JSON.stringify(rows)}`)
      await new Promise((res) => setTimeout(res, 100))
    }
  } finally {
    await db.end({ timeout: 1 })
  }
}
