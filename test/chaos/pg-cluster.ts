// A private PostgreSQL server cluster for fault tests: initdb into a temporary directory, a random port on
// 127.0.0.1, trust auth. It can be restarted (fast or immediate) and stopped without touching anyone
// else's server. As root, the server binaries run as the `postgres` user (initdb refuses root).
import { execFile } from 'node:child_process'
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'

const run = promisify(execFile)

export interface PgCluster {
  /** postgres://postgres@127.0.0.1:<port>/postgres */
  url: string
  port: number
  dir: string
  /** `pg_ctl restart`: 'fast' closes sessions cleanly (like `pg_ctlcluster … restart`), 'immediate' crashes. */
  restart(mode?: 'fast' | 'immediate', downMs?: number): Promise<void>
  stop(mode?: 'fast' | 'immediate'): Promise<void>
  start(): Promise<void>
  /** Stops the server and deletes its directory. */
  destroy(): Promise<void>
}

export function binDir(): string {
  const base = '/usr/lib/postgresql'
  const versions = existsSync(base) ? readdirSync(base).sort((a, b) => Number(b) - Number(a)) : []
  for (const v of versions) if (existsSync(join(base, v, 'bin', 'initdb'))) return join(base, v, 'bin')
  throw new Error('no PostgreSQL server binaries under /usr/lib/postgresql/*/bin')
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number }
      s.close(() => resolve(port))
    })
  })
}

const isRoot = process.getuid?.() === 0

export async function pgBin(bin: string, tool: string, args: string[]): Promise<string> {
  const file = join(bin, tool)
  const { stdout } = isRoot
    ? await run('runuser', ['-u', 'postgres', '--', file, ...args], { timeout: 60_000 })
    : await run(file, args, { timeout: 60_000 })
  return stdout
}

export async function startPgCluster(): Promise<PgCluster> {
  const bin = binDir()
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-pg-'))
  const data = join(dir, 'data')
  if (isRoot) {
    const { stdout } = await run('id', ['-u', 'postgres'])
    const { stdout: gid } = await run('id', ['-g', 'postgres'])
    chownSync(dir, Number(stdout.trim()), Number(gid.trim()))
  }
  chmodSync(dir, 0o700)
  await pgBin(bin, 'initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync'])
  const port = await freePort()
  // Sockets in the cluster's own directory; TCP on loopback only. Small enough to share two cores.
  const serverOptions = [
    `-p ${port}`,
    '-c listen_addresses=127.0.0.1',
    `-c unix_socket_directories=${dir}`,
    '-c max_connections=200',
    '-c shared_buffers=32MB',
    // For the reader of a failed round: a statement slower than a second, and a lock waited on for as long
    // (deadlock_timeout), are in server.log with their times (the harness prints those near a fault).
    '-c log_lock_waits=on',
    '-c log_min_duration_statement=1000',
  ].join(' ')
  const log = join(dir, 'server.log')
  const start = async () => {
    await pgBin(bin, 'pg_ctl', ['-D', data, '-l', log, '-o', serverOptions, '-w', '-t', '60', 'start'])
  }
  const stop = async (mode: 'fast' | 'immediate' = 'fast') => {
    await pgBin(bin, 'pg_ctl', ['-D', data, '-m', mode, '-w', '-t', '60', 'stop'])
  }
  await start()
  let destroyed = false
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    dir,
    start,
    stop,
    async restart(mode = 'fast', downMs = 0) {
      await stop(mode)
      // How long the server stays down is the fault.
      if (downMs > 0) await new Promise((r) => setTimeout(r, downMs))
      await start()
    },
    async destroy() {
      if (destroyed) return
      destroyed = true
      await stop('immediate').catch(() => {})
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
