// npx tsx bench/profile-summary.ts <file.cpuprofile> [top]: the functions with the most self time in a
// V8 CPU profile (node --cpu-prof; the bench writes one for the warm tollgate when BENCH_PROFILE_DIR is set).
import { readFileSync } from 'node:fs'

interface ProfileNode {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
  hitCount?: number
}

const [file, topArg] = process.argv.slice(2)
if (!file) {
  process.stderr.write('usage: tsx bench/profile-summary.ts <file.cpuprofile> [top]\n')
  process.exit(64)
}
const profile = JSON.parse(readFileSync(file, 'utf8')) as {
  nodes: ProfileNode[]
  startTime: number
  endTime: number
  samples: number[]
}
const totalMs = (profile.endTime - profile.startTime) / 1000
const msPerSample = totalMs / profile.samples.length
const byFrame = new Map<string, number>()
for (const n of profile.nodes) {
  const { functionName, url, lineNumber } = n.callFrame
  const where = url ? `${url.replace(/^.*\/(node_modules|src)\//, '$1/')}:${lineNumber + 1}` : ''
  const key = `${functionName || '(anonymous)'} ${where}`.trim()
  byFrame.set(key, (byFrame.get(key) ?? 0) + (n.hitCount ?? 0))
}
const rows = [...byFrame.entries()].sort((a, b) => b[1] - a[1]).slice(0, Number(topArg ?? 25))
const total = profile.samples.length
process.stdout.write(`profile ${totalMs.toFixed(0)} ms, ${total} samples\n`)
for (const [key, hits] of rows) {
  process.stdout.write(
    `${((hits / total) * 100).toFixed(1).padStart(5)} %  ${(hits * msPerSample).toFixed(0).padStart(6)} ms  ${key}\n`,
  )
}
