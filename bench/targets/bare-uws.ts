// Target: a bare uWS process answering tollgate's own 402 (same status, headers, body) to every request.
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { startTs } from './processes.ts'
import type { Target } from './target.ts'

export async function startBareUws(options: {
  dir: string
  challengeUrl: string
  maxMs: number
}): Promise<Target> {
  const r = await fetch(options.challengeUrl)
  const headers: Array<[string, string]> = []
  r.headers.forEach((v, k) => {
    if (!['content-length', 'date', 'connection', 'keep-alive', 'uwebsockets'].includes(k))
      headers.push([k, v])
  })
  const file = join(options.dir, 'bare-402.json')
  writeFileSync(file, JSON.stringify({ headers, body: await r.text() }))
  const child = await startTs(
    'bench/targets/bare-uws-server.ts',
    { BARE_402_FILE: file, MAX_MS: String(options.maxMs) },
    /"port"/,
  )
  return {
    name: 'bare-uws',
    base: `http://127.0.0.1:${JSON.parse(child.line).port}`,
    pid: child.proc.pid ?? null,
    stop: () => child.stop(),
  }
}
