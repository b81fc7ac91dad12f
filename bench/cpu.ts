// CPU time of processes from /proc (Linux): what each part of a scenario costs per request, so a figure
// says what limited it (the proxy, the upstream, the database, or the load generator itself).
import { readdirSync, readFileSync } from 'node:fs'

/** Clock ticks per second of /proc/<pid>/stat times (USER_HZ; 100 on Linux). */
const TICKS_PER_S = 100

function stat(pid: number): string[] | null {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')
  } catch {
    return null
  }
}

/** utime + stime of one process, in ticks (0 once it is gone). */
export function cpuTicks(pid: number): number {
  const fields = stat(pid)
  return fields ? Number(fields[11]) + Number(fields[12]) : 0
}

/** The processes and all their descendants. */
export function withChildren(pids: number[]): number[] {
  const all = new Set(pids)
  const parents = new Map<number, number>()
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    const fields = stat(Number(entry))
    if (fields) parents.set(Number(entry), Number(fields[1]))
  }
  // Descendants of descendants too (a cluster parent's workers, nginx's workers).
  for (let grew = true; grew; ) {
    grew = false
    for (const [pid, ppid] of parents) {
      if (all.has(ppid) && !all.has(pid)) {
        all.add(pid)
        grew = true
      }
    }
  }
  return [...all]
}

/**
 * The PostgreSQL server backends serving databases whose name contains `database` (their title reads
 * "postgres: 15/main: user dbname host(port) state"): other work on the same server is not counted, nor
 * are the shared WAL writer and checkpointer (a small undercount).
 */
export function postgresBackends(database: string): number[] {
  const pids: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const title = readFileSync(`/proc/${entry}/cmdline`, 'utf8')
      if (title.startsWith('postgres: ') && title.includes(database)) pids.push(Number(entry))
    } catch {}
  }
  return pids
}

/** Starts counting the CPU of groups of processes; `stop(requests)` gives µs of CPU per request per group. */
export function cpuMeter(groups: Record<string, () => number[]>) {
  const start = new Map<string, Map<number, number>>()
  for (const [name, pids] of Object.entries(groups)) {
    start.set(name, new Map(pids().map((p) => [p, cpuTicks(p)])))
  }
  return {
    stop(requests: number): Record<string, number> {
      const out: Record<string, number> = {}
      for (const [name, pids] of Object.entries(groups)) {
        const before = start.get(name)!
        let ticks = 0
        // Processes that appeared during the run (new backends) count from zero; those gone by now are left
        // out (their last ticks are unknown: counting them as 0 made a closed connection's backend negative).
        for (const p of new Set([...before.keys(), ...pids()])) {
          if (stat(p) === null) continue
          ticks += cpuTicks(p) - (before.get(p) ?? 0)
        }
        out[name] = requests > 0 ? Math.round((ticks / TICKS_PER_S / requests) * 1e6) : 0
      }
      return out
    },
  }
}

/** Cumulative idle and total ticks of all cores (/proc/stat's first line). */
export function machineTicks(): { idle: number; total: number } {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number)
  return { idle: fields[3]! + fields[4]!, total: fields.reduce((a, b) => a + b, 0) }
}

/**
 * The whole machine's CPU busy during a load, % of all cores (everything but idle and iowait, kernel network
 * work included, which no process is charged for): near 100 % means the cores were the limit, whoever used
 * them. Sampled every 200 ms so the busy share covers the load itself, from its start to the sample before its
 * last answer (a run bounded by proofs ends at autocannon's next 1 s tick, idle after its last answer).
 */
export function machineBusy() {
  const samples: Array<{ at: number; idle: number; total: number }> = [
    { at: performance.now(), ...machineTicks() },
  ]
  const timer = setInterval(() => samples.push({ at: performance.now(), ...machineTicks() }), 200)
  timer.unref()
  return {
    /** Busy % from the start to the last sample taken by `untilMs` (performance.now() time). */
    stopPct(untilMs: number): number {
      clearInterval(timer)
      samples.push({ at: performance.now(), ...machineTicks() })
      const first = samples[0]!
      const last = samples.findLast((x) => x.at <= untilMs && x !== first) ?? samples.at(-1)!
      const total = last.total - first.total
      return total > 0 ? Math.round(((total - (last.idle - first.idle)) / total) * 100) : 0
    },
  }
}
