// Waits until the machine stops burning CPU on anything but this process: after the proofs are mined, every
// warm instance's watcher parses thousands of transfer logs, and anvil, PostgreSQL's autovacuum and
// checkpointer have their own catching up to do; any of it would load the next scenario.
import { cpuTicks, machineTicks, withChildren } from '../cpu.ts'

/**
 * Resolves once, in one second, the given processes (and their children) used under `maxTicksPerS` CPU ticks
 * (1/100 s) and the whole machine, this process left out, under `maxTicksPerS` + 10; or after maxMs. The
 * machine-wide check catches what the pids do not name (anvil, autovacuum workers): a full run that waited
 * only for the instances started its first scenarios with a core and more busy elsewhere (direct 8,879 req/s
 * against 43,613 in the run before).
 */
export async function waitQuiet(
  pids: number[],
  options = { maxTicksPerS: 10, maxMs: 90_000 },
): Promise<number> {
  const started = Date.now()
  const all = withChildren(pids)
  const others = () => {
    const m = machineTicks()
    // Both count USER_HZ ticks (1/100 s), /proc/stat's summed over the cores.
    return m.total - m.idle - cpuTicks(process.pid)
  }
  let before = all.reduce((n, p) => n + cpuTicks(p), 0)
  let machineBefore = others()
  while (Date.now() - started < options.maxMs) {
    await new Promise((r) => setTimeout(r, 1_000))
    const now = all.reduce((n, p) => n + cpuTicks(p), 0)
    const machineNow = others()
    if (now - before < options.maxTicksPerS && machineNow - machineBefore < options.maxTicksPerS + 10) break
    before = now
    machineBefore = machineNow
  }
  return Date.now() - started
}
