// Runs tollgate as a real child process, for tests that kill it (SIGKILL) and start it again on the same
// database. Node itself is spawned, on the built dist/ when it is current or with tsx as a loader
// (`node --import tsx src/main.ts`; entry.ts): the PID we hold is the server's own, so a SIGKILL kills the
// server (the `tsx` binary would be a wrapper whose death leaves the server running as an orphan on the
// shared port). None outlives the test process.
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { connect, createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { entryArgs } from './entry.ts'
import { waitFor } from './wait-for.ts'

const ROOT = join(import.meta.dirname, '..', '..')

export interface ChildService {
  url: string
  adminUrl: string
  /** The server's own PID (node, not a wrapper): gone once `exited` resolves. */
  pid: number
  /** stdout + stderr so far. */
  output(): string
  /** Resolves when the process has exited (with its signal, e.g. 'SIGKILL', or null). */
  exited: Promise<NodeJS.Signals | null>
  kill(signal?: NodeJS.Signals): Promise<void>
}

export interface ChildServiceOptions {
  /** A PostgreSQL server URL; null → embedded PGlite in dataDir (kept across restarts). */
  databaseUrl: string | null
  dataDir?: string
  treasuryKey: `0x${string}`
  /** Extra environment, e.g. TOLLGATE_FAULT_POINT for fault injection. */
  env?: Record<string, string>
  /** Settings merged through a TOLLGATE_CONFIG file. */
  settings?: Record<string, unknown>
  port?: number
  /** The chain to use; by default the one the vitest global setup started (chaos runs pass their own). */
  rpcUrl?: string
  usdcAddress?: string
  /** How long it may take to say it listens (60 s): more for a start that migrates and forks workers. */
  startTimeoutMs?: number
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.once('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port
      s.close(() => resolve(port))
    })
  })
}

/**
 * A loopback port where nothing listens and nothing will: a privileged port (below 1024, outside the kernel's
 * range for port 0, and no test binds one) that refuses a connection now. A port freePort() found free can be
 * handed to another test file's server a moment later (a "closed" upstream once answered 404 in CI).
 */
export async function refusedPort(): Promise<number> {
  for (const port of [9, 1, 3, 5, 7, 11, 13, 17, 19]) {
    const refused = await new Promise<boolean>((resolve) => {
      const s = connect({ host: '127.0.0.1', port })
      s.once('connect', () => {
        s.destroy()
        resolve(false)
      })
      s.once('error', (err: NodeJS.ErrnoException) => resolve(err.code === 'ECONNREFUSED'))
    })
    if (refused) return port
  }
  throw new Error('no refusing privileged port on 127.0.0.1')
}

/** True while a process with this PID exists (signal 0 checks without sending anything). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false
    throw err
  }
}

export function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'tollgate-test-'))
}

/**
 * Starts the service; a port picked here (free when probed) that something else took before the child bound
 * it (another process's outgoing connection on a busy machine) is picked again, at most three times.
 */
export async function startChildService(options: ChildServiceOptions): Promise<ChildService> {
  for (let attempt = 1; ; attempt++) {
    const port = options.port ?? (await freePort())
    const adminPort = await freePort()
    try {
      return await launchChildService(options, port, adminPort)
    } catch (err) {
      const message = (err as Error).message
      const ours = options.port === undefined || /admin port/.test(message)
      if (attempt >= 3 || !ours || !/TOLLGATE_PORT_IN_USE/.test(message)) throw err
    }
  }
}

async function launchChildService(
  options: ChildServiceOptions,
  port: number,
  adminPort: number,
): Promise<ChildService> {
  const dir = tempDir()
  const configFile = join(dir, 'config.json')
  const settings = {
    ...options.settings,
    database: { data_dir: options.dataDir ?? join(dir, 'pglite'), ...(options.settings?.database as object) },
  }
  writeFileSync(configFile, JSON.stringify(settings))
  // vitest only inside a test run: `npm run chaos` uses this helper outside vitest.
  const chain =
    options.rpcUrl && options.usdcAddress
      ? { rpcUrl: options.rpcUrl, usdcAddress: options.usdcAddress }
      : await import('vitest').then((v) => ({
          rpcUrl: v.inject('rpcUrl'),
          usdcAddress: v.inject('usdcAddress'),
        }))
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    NODE_ENV: 'test',
    PORT: String(port),
    ADMIN_PORT: String(adminPort),
    RPC_URL: chain.rpcUrl,
    USDC_ADDRESS: chain.usdcAddress,
    TREASURY_PRIVATE_KEY: options.treasuryKey,
    TOLLGATE_CONFIG: configFile,
    ...options.env,
  }
  if (options.databaseUrl) env.DATABASE_URL = options.databaseUrl
  else delete env.DATABASE_URL
  const proc: ChildProcess = spawn(process.execPath, entryArgs('main'), {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  proc.stdout!.on('data', (d: Buffer) => {
    output += d.toString()
  })
  proc.stderr!.on('data', (d: Buffer) => {
    output += d.toString()
  })
  const killOnExit = () => proc.kill('SIGKILL')
  process.once('exit', killOnExit)
  const exited = new Promise<NodeJS.Signals | null>((resolve) => {
    proc.once('exit', (_code, signal) => {
      process.removeListener('exit', killOnExit)
      resolve(signal)
    })
  })
  try {
    await waitFor(
      () => {
        if (proc.exitCode !== null || proc.signalCode !== null)
          throw new Error(`tollgate exited before it was ready:\n${output}`)
        return /tollgate listening on/.test(output)
      },
      {
        timeoutMs: options.startTimeoutMs ?? 60_000,
        intervalMs: 50,
        what: () => `tollgate to start:\n${output}`,
      },
    )
  } catch (err) {
    proc.kill('SIGKILL')
    throw err
  }
  return {
    url: `http://127.0.0.1:${port}`,
    adminUrl: `http://127.0.0.1:${adminPort}`,
    pid: proc.pid!,
    output: () => output,
    exited,
    async kill(signal = 'SIGTERM') {
      if (proc.exitCode !== null || proc.signalCode !== null) return
      proc.kill(signal)
      const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000)
      await exited
      clearTimeout(timer)
    },
  }
}
