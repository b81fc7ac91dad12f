// Child processes for the benchmark (upstream, tollgate), each bounded in time and stopped by PID.

import { type ChildProcess, spawn } from 'node:child_process'
import { createWriteStream } from 'node:fs'
import { createServer } from 'node:net'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
const TSX = join(ROOT, 'node_modules', '.bin', 'tsx')

export interface Child {
  proc: ChildProcess
  stop(): Promise<void>
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

/** Children still running: killed by one exit hook if the bench ends without stopping them. */
const live = new Set<ChildProcess>()
process.once('exit', () => {
  for (const proc of live) proc.kill('SIGKILL')
})

function track(proc: ChildProcess): Child {
  live.add(proc)
  proc.once('exit', () => live.delete(proc))
  return {
    proc,
    stop: () =>
      new Promise((resolve) => {
        live.delete(proc)
        if (proc.exitCode !== null || proc.signalCode !== null) return resolve()
        proc.once('exit', () => resolve())
        proc.kill('SIGTERM')
        // A profiled process writes its profile on exit, after draining its settlements: give it time.
        const graceMs = process.env.BENCH_PROFILE_DIR ? 60_000 : 5_000
        setTimeout(() => proc.kill('SIGKILL'), graceMs).unref()
      }),
  }
}

/** Starts a TypeScript file with tsx; resolves with its first stdout line matching `ready`. */
export function startTs(
  file: string,
  env: Record<string, string>,
  ready: RegExp,
  timeoutMs = 60_000,
): Promise<Child & { line: string }> {
  return startProcess(TSX, file, env, ready, timeoutMs)
}

/** Starts a built JavaScript file with node (the production way). */
export function startNode(
  file: string,
  env: Record<string, string>,
  ready: RegExp,
  timeoutMs = 60_000,
): Promise<Child & { line: string }> {
  return startProcess(process.execPath, file, env, ready, timeoutMs)
}

function startProcess(
  runner: string,
  file: string,
  env: Record<string, string>,
  ready: RegExp,
  timeoutMs: number,
): Promise<Child & { line: string }> {
  const nodeArgs = env.BENCH_NODE_ARGS ? env.BENCH_NODE_ARGS.split(' ') : []
  const proc = spawn(runner, [...nodeArgs, file], {
    cwd: ROOT,
    // The bench's own environment minus DATABASE_URL: a target gets a database only from its options
    // (BENCH_DATABASE_URL makes a fresh one per instance), never the developer's by accident.
    env: { ...withoutDatabaseUrl(process.env), ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const child = track(proc)
  return new Promise((resolve, reject) => {
    let buffer = ''
    const timer = setTimeout(
      () => reject(new Error(`${file} did not become ready in ${timeoutMs} ms`)),
      timeoutMs,
    )
    proc.stdout!.on('data', (chunk: Buffer) => {
      buffer += chunk.toString()
      const m = buffer.split('\n').find((l) => ready.test(l))
      if (m) {
        clearTimeout(timer)
        proc.stdout!.removeAllListeners('data')
        if (process.env.BENCH_CHILD_LOG)
          proc.stdout!.pipe(createWriteStream(`${process.env.BENCH_CHILD_LOG}-${proc.pid}.log`))
        else proc.stdout!.resume()
        resolve({ ...child, line: m })
      }
    })
    proc.once('exit', (code) => {
      clearTimeout(timer)
      reject(new Error(`${file} exited with ${code} before it was ready`))
    })
  })
}

function withoutDatabaseUrl(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const { DATABASE_URL: _, ...rest } = env
  return rest
}
