// npx tsx bench/profile-summary.ts <file.cpuprofile> [top] [--busiest S] [--inclusive] [--folded out.txt]:
// the functions with the most self time in a V8 CPU profile (node --cpu-prof; the bench writes one for the
// warm tollgate when BENCH_PROFILE_DIR is set).
//   --busiest S   only the S seconds with the fewest idle samples (the load, not start-up or quiet time)
//   --after S     leave out the first S seconds (start-up: loading modules can be busier than the load)
//   --inclusive   time spent in each function and what it called, instead of self time
//   --folded F    writes the sampled stacks in the folded format flame graph tools read ("a;b;c count")
import { readFileSync, writeFileSync } from 'node:fs'
import { parseArgs } from 'node:util'

interface ProfileNode {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
  children?: number[]
}

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    busiest: { type: 'string' },
    inclusive: { type: 'boolean', default: false },
    after: { type: 'string' },
    folded: { type: 'string' },
  },
})
const [file, topArg] = positionals
if (!file) {
  process.stderr.write(
    'usage: tsx bench/profile-summary.ts <file.cpuprofile> [top] [--busiest S] [--inclusive] [--folded F]\n',
  )
  process.exit(64)
}
const profile = JSON.parse(readFileSync(file, 'utf8')) as {
  nodes: ProfileNode[]
  startTime: number
  endTime: number
  samples: number[]
  timeDeltas: number[]
}

const byId = new Map(profile.nodes.map((n) => [n.id, n]))
const parent = new Map<number, number>()
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
const nameOf = (n: ProfileNode) => {
  const { functionName, url, lineNumber } = n.callFrame
  const where = url ? `${url.replace(/^.*\/(node_modules|src|dist)\//, '$1/')}:${lineNumber + 1}` : ''
  return `${functionName || '(anonymous)'} ${where}`.trim()
}
const IDLE = new Set(['(idle)', '(program)'])

// Each sample's time (µs since start), then the window asked for.
const at: number[] = []
let t = 0
for (const d of profile.timeDeltas) {
  t += d
  at.push(t)
}
const { from, to } = values.busiest
  ? busiestWindow(Number(values.busiest) * 1e6)
  : { from: Number(values.after ?? 0) * 1e6, to: Number.POSITIVE_INFINITY }
const samples: Array<{ node: number; us: number }> = []
for (let i = 0; i < profile.samples.length; i++) {
  if (at[i]! < from || at[i]! > to) continue
  samples.push({ node: profile.samples[i]!, us: profile.timeDeltas[i + 1] ?? profile.timeDeltas[i]! })
}

const totalUs = samples.reduce((s, x) => s + x.us, 0)
const busyUs = samples.reduce((s, x) => (IDLE.has(nameOf(byId.get(x.node)!)) ? s : s + x.us), 0)
const byFrame = new Map<string, number>()
const folded = new Map<string, number>()
for (const s of samples) {
  const stack = stackOf(s.node)
  if (values.inclusive) {
    // A recursive function counts once per sample.
    for (const name of new Set(stack)) byFrame.set(name, (byFrame.get(name) ?? 0) + s.us)
  } else {
    const self = stack.at(-1)!
    byFrame.set(self, (byFrame.get(self) ?? 0) + s.us)
  }
  if (values.folded) {
    const key = stack.map((x) => x.replaceAll(';', ',')).join(';')
    folded.set(key, (folded.get(key) ?? 0) + s.us)
  }
}
if (values.folded) {
  writeFileSync(values.folded, [...folded].map(([k, us]) => `${k} ${Math.round(us)}`).join('\n'))
}

const rows = [...byFrame.entries()].sort((a, b) => b[1] - a[1]).slice(0, Number(topArg ?? 25))
process.stdout.write(
  `profile ${(totalUs / 1000).toFixed(0)} ms${values.busiest ? ` (busiest ${values.busiest} s)` : ''}, ` +
    `${samples.length} samples, busy ${(busyUs / 1000).toFixed(0)} ms; ${values.inclusive ? 'inclusive' : 'self'} time, % of busy\n`,
)
for (const [key, us] of rows) {
  const share = IDLE.has(key) ? '     ' : ((us / busyUs) * 100).toFixed(1).padStart(5)
  process.stdout.write(`${share} %  ${(us / 1000).toFixed(0).padStart(6)} ms  ${key}\n`)
}

/** Root first, without the synthetic (root). */
function stackOf(id: number): string[] {
  const names: string[] = []
  for (let n: number | undefined = id; n !== undefined; n = parent.get(n)) {
    const node = byId.get(n)!
    if (node.callFrame.functionName !== '(root)') names.push(nameOf(node))
  }
  return names.reverse()
}

/** The window of `lengthUs` with the most non-idle time, found in 100 ms steps. */
function busiestWindow(lengthUs: number): { from: number; to: number } {
  const step = 100_000
  const buckets: number[] = []
  for (let i = 0; i < profile.samples.length; i++) {
    if (IDLE.has(nameOf(byId.get(profile.samples[i]!)!))) continue
    const b = Math.floor(at[i]! / step)
    buckets[b] = (buckets[b] ?? 0) + (profile.timeDeltas[i + 1] ?? 0)
  }
  const width = Math.max(1, Math.round(lengthUs / step))
  let best = 0
  let bestSum = -1
  for (let b = Math.floor((Number(values.after ?? 0) * 1e6) / step); b + width <= buckets.length; b++) {
    let sum = 0
    for (let k = b; k < b + width; k++) sum += buckets[k] ?? 0
    if (sum > bestSum) [best, bestSum] = [b, sum]
  }
  return { from: best * step, to: (best + width) * step }
}
