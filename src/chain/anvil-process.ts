// Runs the anvil binary from the @foundry-rs/anvil npm package on loopback, and makes sure it never
// outlives this process: a clean stop, an exit hook, and a watchdog for deaths no hook can see (SIGKILL).
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { createRequire } from 'node:module'
import { createServer } from 'node:net'
import { dirname, join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { listensOn } from '../port-probe.ts'
import { ChainError } from './errors.ts'

export interface AnvilOptions {
  chainId: number
  /** A fixed port; without it a free one is picked (anvil has no port 0) and a lost race is retried. */
  port?: number
  accounts: number
  /** Interval mining; without it every transaction is mined at once (automine). */
  blockTimeSeconds?: number
  /** Gas per block; anvil's default is 30 M (a bench sets a real chain's, e.g. Base's). */
  gasLimit?: bigint
  startTimeoutMs?: number
  /** Load the chain from this file if it exists, dump it there on exit and every stateIntervalSeconds. */
  stateFile?: string
  stateIntervalSeconds?: number
}

export interface AnvilProcess {
  rpcUrl: string
  port: number
  pid: number
  stop(): Promise<void>
}

const ARCH: Record<string, string> = { x64: 'amd64', arm64: 'arm64' }
const PORT_ATTEMPTS = 5

export function anvilBinaryPath(): string {
  const pkg = `@foundry-rs/anvil-${process.platform}-${ARCH[process.arch] ?? process.arch}`
  try {
    const dir = dirname(createRequire(import.meta.url).resolve(`${pkg}/package.json`))
    return join(dir, 'bin', process.platform === 'win32' ? 'anvil.exe' : 'anvil')
  } catch (cause) {
    throw new ChainError(
      'TOLLGATE_ANVIL_NOT_FOUND',
      `the local chain needs anvil from ${pkg}, which is not installed for ${process.platform}-${process.arch}. ` +
        'Run `npm ci` (optional dependencies enabled), or set NETWORK=base-sepolia with RPC_URL.',
      { cause },
    )
  }
}

export async function spawnAnvil(options: AnvilOptions): Promise<AnvilProcess> {
  const bin = anvilBinaryPath()
  for (let attempt = 1; ; attempt++) {
    const port = options.port ?? (await freePort())
    const started = await startOnce(bin, port, options)
    if (started.ok) return started.anvil
    // Another process may take the port between our probe and anvil's bind: pick another one.
    const retry = options.port === undefined && /address already in use/i.test(started.output)
    if (!retry || attempt >= PORT_ATTEMPTS) {
      throw new ChainError(
        'TOLLGATE_ANVIL_START_FAILED',
        `anvil did not start on 127.0.0.1:${port}: ${started.output.trim() || 'no output'}`,
      )
    }
  }
}

type StartResult = { ok: true; anvil: AnvilProcess } | { ok: false; output: string }

async function startOnce(bin: string, port: number, options: AnvilOptions): Promise<StartResult> {
  const args = ['--host', '127.0.0.1', '--port', String(port), '--chain-id', String(options.chainId)]
  args.push('--accounts', String(options.accounts), '--quiet')
  if (options.blockTimeSeconds) args.push('--block-time', String(options.blockTimeSeconds))
  if (options.gasLimit) args.push('--gas-limit', String(options.gasLimit))
  if (options.stateFile) {
    // --state loads the file when present and dumps on exit (SIGTERM included); the interval bounds what a
    // SIGKILL loses. Blocks, receipts and nonces come back, so old transaction hashes are never reproduced.
    args.push('--state', options.stateFile, '--state-interval', String(options.stateIntervalSeconds ?? 2))
  }
  const child = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] })
  let output = ''
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    output = (output + chunk).slice(-2000)
  })
  // A spawn error (ENOENT, EACCES) may come without an 'exit': either one ends the wait.
  const exited = new Promise<'exited'>((resolve) => {
    child.once('exit', () => resolve('exited'))
    child.once('error', (err) => {
      output += String(err)
      resolve('exited')
    })
  })
  const rpcUrl = `http://127.0.0.1:${port}`
  const ready = await Promise.race([
    waitForOwnRpc(child, port, options.chainId, options.startTimeoutMs ?? 15_000),
    exited,
  ])
  if (ready !== 'ready') {
    child.kill('SIGKILL')
    return {
      ok: false,
      output: ready === 'timeout' ? `no answer within the start timeout. ${output}` : output,
    }
  }
  return { ok: true, anvil: supervise(child, rpcUrl, port) }
}

function supervise(child: ChildProcess, rpcUrl: string, port: number): AnvilProcess {
  const pid = child.pid!
  const watchdog = startWatchdog(pid)
  // Covers process.exit() and a normal end of the event loop; signals without handlers skip it (watchdog).
  // SIGTERM, not SIGKILL: a chain kept in a state file is dumped on the way out (the watchdog, whose pipe
  // closes with us, follows up with SIGKILL if anvil lingers).
  const onExit = () => {
    try {
      process.kill(pid, 'SIGTERM')
    } catch {}
  }
  process.once('exit', onExit)
  child.once('exit', () => {
    process.off('exit', onExit)
    watchdog?.kill('SIGKILL')
  })
  // A forgotten stop() must not keep the parent alive.
  child.unref()
  ;(child.stderr as unknown as { unref?: () => void } | null)?.unref?.()

  let stopping: Promise<void> | undefined
  const stop = () => {
    stopping ??= (async () => {
      process.off('exit', onExit)
      // The watchdog goes first: once anvil is gone its pid may be reused, and the watchdog would kill that.
      watchdog?.kill('SIGKILL')
      if (child.exitCode !== null || child.signalCode !== null) return
      const exited = once(child, 'exit')
      // Unref'd so far; the wait for its exit must hold the event loop open or the exit goes unseen.
      child.ref()
      child.kill('SIGTERM')
      const done = await Promise.race([exited.then(() => true), sleep(3000, false, { ref: false })])
      if (!done) {
        child.kill('SIGKILL')
        await exited
      }
    })()
    return stopping
  }
  return { rpcUrl, port, pid, stop }
}

/**
 * A tiny shell that blocks reading a pipe from us. The pipe closes when this process dies however it dies
 * (even SIGKILL), and then the shell stops anvil: SIGTERM first, so a chain kept in a state file is dumped,
 * SIGKILL a few seconds later. Detached so a terminal's Ctrl-C does not take it first.
 */
function startWatchdog(pid: number): ChildProcess | null {
  if (process.platform === 'win32') return null
  const watchdog = spawn(
    'sh',
    [
      '-c',
      'read _; kill -TERM "$1" 2>/dev/null || exit 0; sleep 3; kill -9 "$1" 2>/dev/null',
      'tollgate-anvil-watchdog',
      String(pid),
    ],
    {
      stdio: ['pipe', 'ignore', 'ignore'],
      detached: true,
    },
  )
  watchdog.on('error', () => {}) // no sh: the exit hook still covers the ordinary cases
  watchdog.unref()
  ;(watchdog.stdin as unknown as { unref?: () => void } | null)?.unref?.()
  return watchdog
}

/**
 * Ready when the RPC on `port` is this child's: it answers eth_chainId with our chain id and (where the OS
 * tells) the listening socket is the child's. A 200 alone is not enough: the port is probed free before anvil
 * binds it, and in between another server may take it (an HTTP upstream answers 200 to anything, another
 * anvil answers JSON-RPC); anvil then fails to bind and exits, but the other server may answer first, and the
 * chain would be someone else's (a test's transactions waited out their receipt timeout against one).
 */
async function waitForOwnRpc(
  child: ChildProcess,
  port: number,
  chainId: number,
  timeoutMs: number,
): Promise<'ready' | 'timeout'> {
  const deadline = Date.now() + timeoutMs
  const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] })
  const expected = `0x${chainId.toString(16)}`
  // Until the child exits too: the start then fails at once, and this loop must not go on polling the port.
  while (Date.now() < deadline && child.exitCode === null && child.signalCode === null) {
    try {
      const res = await fetch(`http://127.0.0.1:${port}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
        signal: AbortSignal.timeout(1000),
      })
      const answer = res.ok ? ((await res.json()) as { result?: unknown }) : null
      if (answer?.result === expected && listensOn(child.pid, port) !== false) return 'ready'
    } catch {}
    await sleep(20)
  }
  return 'timeout'
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.unref()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })
}

/**
 * Dev chain and tests only: runtime code at an address (anvil_setCode). For contracts with no constructor
 * or immutables whose storage starts empty, this is the same as deploying them there.
 */
export async function anvilSetCode(rpcUrl: string, address: string, code: string): Promise<void> {
  await anvilRequest(rpcUrl, 'anvil_setCode', [address, code])
}

/** Dev chain and tests only: one storage word of a contract installed by anvilSetCode (its constructor's work). */
export async function anvilSetStorageAt(
  rpcUrl: string,
  q: { address: string; slot: string; value: string },
): Promise<void> {
  await anvilRequest(rpcUrl, 'anvil_setStorageAt', [q.address, q.slot, q.value])
}

async function anvilRequest(rpcUrl: string, method: string, params: string[]): Promise<void> {
  const res = await fetch(rpcUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  })
  const body = (await res.json()) as { error?: { message: string } }
  if (body.error) throw new Error(`${method} ${params[0]}: ${body.error.message}`)
}
