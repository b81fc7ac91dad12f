// Waits until the given processes (and their children) stop burning CPU: after the proofs are mined, every
// warm instance's watcher parses thousands of transfer logs, which would otherwise load the next scenario.
import { cpuTicks, withChildren } from '../cpu.ts'

/** Resolves once the processes used under `maxTicksPerS` CPU ticks (1/100 s) in one second, or after maxMs. */
export async function waitQuiet(
  pids: number[],
  options = { maxTicksPerS: 10, maxMs: 90_000 },
): Promise<number> {
  const started = Date.now()
  const all = withChildren(pids)
  let before = all.reduce((n, p) => n + cpuTicks(p), 0)
  while (Date.now() - started < options.maxMs) {
    await new Promise((r) => setTimeout(r, 1_000))
    const now = all.reduce((n, p) => n + cpuTicks(p), 0)
    if (now - before < options.maxTicksPerS) break
    before = now
  }
  return Date.now() - started
}
