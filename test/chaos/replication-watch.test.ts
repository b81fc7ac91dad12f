// The replication watch against a real primary and standby (test/chaos/pg-standby.ts): with an asynchronous
// standby tollgate says so (a warning at start, tollgate_db_standbys and tollgate_db_replication_unsafe,
// /readyz degraded, the TollgateReplicationUnsafe alert pending in a real Prometheus) and, with
// database.require_synchronous_standby, answers paid calls 503 replication_unsafe; once the primary makes the
// standby synchronous, all of it clears and the same proof is served. Last, what a role without
// pg_read_all_stats reads (the standby, not its sync state). Bounded: about a minute.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { describe, expect, it } from 'vitest'
import { makeProofs } from '../../bench/proofs.ts'
import { startDevChain } from '../../src/chain/dev-chain.ts'
import { judgeReplication, readReplication } from '../../src/db/replication-watch.ts'
import { createSql } from '../../src/db/sql.ts'
import { postJson } from '../helpers/api.ts'
import { freePort, startChildService } from '../helpers/child-service.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { startCountingUpstream } from './counting-upstream.ts'
import { startPgCluster } from './pg-cluster.ts'
import { setReplicationMode, startStandby, waitForStreaming } from './pg-standby.ts'

const ROOT = join(import.meta.dirname, '../..')
const PRICE_ATOMIC = 1_000n

function hasPrometheus(): boolean {
  try {
    execFileSync('prometheus', ['--version'], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}

/** The value of one sample in a /metrics text, e.g. `tollgate_db_standbys{sync_state="async"}`. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `))
  return line === undefined ? undefined : Number(line.slice(series.length + 1))
}

function logLines(output: string): Array<Record<string, unknown>> {
  return output
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
}

describe.runIf(existsSync('/usr/lib/postgresql'))('replication state of a real primary', () => {
  it('an asynchronous standby is reported and refuses paid calls when required; a synchronous one serves', async ({
    onTestFailed,
  }) => {
    const cleanups: Array<() => Promise<unknown>> = []
    let output = () => ''
    onTestFailed(() => {
      process.stderr.write(`\n${output().slice(-4000)}\n`)
    })
    try {
      const primary = await startPgCluster()
      cleanups.push(() => primary.destroy())
      const standby = await startStandby(primary)
      cleanups.push(() => standby.destroy())
      await setReplicationMode(primary, standby, 'async')
      await waitForStreaming(primary, standby, false)
      const chain = await startDevChain({
        payers: 1,
        payerFunding: PRICE_ATOMIC * 10n,
        treasuryFunding: 1_000_000n,
      })
      cleanups.push(() => chain.stop())
      const upstream = await startCountingUpstream()
      cleanups.push(() => upstream.close())
      const child = await startChildService({
        databaseUrl: primary.url,
        treasuryKey: chain.treasury.privateKey,
        rpcUrl: chain.rpcUrl,
        usdcAddress: chain.usdcAddress,
        settings: {
          proxy: { allow_private_upstreams: true },
          chain: { poll_interval_ms: 200 },
          database: { require_synchronous_standby: true, replication_check_ms: 200 },
          log: { level: 'warn' },
        },
      })
      cleanups.push(() => child.kill('SIGTERM'))
      output = child.output
      // Said at start, before the first paid call could be taken.
      expect(logLines(child.output())).toContainEqual(
        expect.objectContaining({
          level: 'warn',
          msg: 'replication unsafe: paid calls refused',
          reason: 'asynchronous_standbys',
          require_synchronous_standby: true,
        }),
      )

      const metrics = async () => (await fetch(`${child.adminUrl}/metrics`)).text()
      const asyncText = await metrics()
      expect(sample(asyncText, 'tollgate_db_standbys{sync_state="async"}')).toBe(1)
      expect(sample(asyncText, 'tollgate_db_standbys{sync_state="sync"}')).toBe(0)
      expect(sample(asyncText, 'tollgate_db_replication_unsafe')).toBe(1)
      const degraded = await fetch(`${child.adminUrl}/readyz`)
      expect(degraded.status).toBe(200)
      const degradedBody = (await degraded.json()) as {
        status: string
        checks: Array<{ name: string; ok: boolean; degraded?: boolean; detail?: string }>
      }
      expect(degradedBody.status).toBe('degraded')
      const check = degradedBody.checks.find((c) => c.name === 'replication')
      expect(check).toMatchObject({ ok: true, degraded: true })
      expect(check?.detail).toMatch(/^asynchronous_standbys: .*standby1 \(async\).*paid calls refused/)

      // A real Prometheus scraping this instance with deploy/alerts.yml: the rule's condition holds (pending
      // until its `for` passes), and clears once the standby is synchronous.
      const prom = hasPrometheus() ? await startPrometheus(new URL(child.adminUrl).host) : null
      if (prom) cleanups.push(() => prom.stop())
      if (prom)
        await waitFor(async () => ((await prom.alertState()) === 'pending' ? true : null), {
          what: 'TollgateReplicationUnsafe pending',
          timeoutMs: 20_000,
          intervalMs: 250,
          retryErrors: true,
        })

      // The management API still answers; the paid call is refused before anything is verified or claimed.
      const reg = await postJson(child.url, '/api/v1/register', {
        wallet_address: privateKeyToAccount(generatePrivateKey()).address,
        business_name: 'Replication',
      })
      const endpoint = await postJson(
        child.url,
        '/api/v1/endpoints',
        { upstream_url: `${upstream.url}/work`, price: 0.001 },
        reg.api_key as string,
      )
      const [hash] = await makeProofs({
        rpcUrl: chain.rpcUrl,
        chainId: chain.chainId,
        usdc: chain.usdcAddress,
        payerKey: chain.payers[0]!.privateKey,
        treasury: chain.treasury.address,
        value: PRICE_ATOMIC,
        count: 1,
      })
      const call = () =>
        fetch(`${child.url}/m/${endpoint.id}/work?p=${hash}`, { headers: { 'x-payment': hash! } })
      const refused = await call()
      expect(refused.status).toBe(503)
      expect(refused.headers.get('retry-after')).toBe('30')
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('replication_unsafe')
      // No 402 invites a payment either.
      expect((await fetch(`${child.url}/m/${endpoint.id}/work`)).status).toBe(503)
      expect(upstream.served.get(hash!) ?? 0).toBe(0)
      // Nor does the hosted checkout take the proof for a payment.
      const payment = await postJson(
        child.url,
        '/api/v1/payments',
        { amount: 0.001, description: 'invoice' },
        reg.api_key as string,
      )
      const checkout = await fetch(`${child.url}/pay/${payment.id}`, {
        method: 'POST',
        headers: { 'x-payment': hash!, accept: 'application/json' },
      })
      expect(checkout.status).toBe(503)
      expect(checkout.headers.get('retry-after')).toBe('30')
      expect(((await checkout.json()) as { error: { code: string } }).error.code).toBe('replication_unsafe')

      await setReplicationMode(primary, standby, 'sync-on')
      await waitForStreaming(primary, standby, true)
      await waitFor(
        async () => (sample(await metrics(), 'tollgate_db_replication_unsafe') === 0 ? true : null),
        { what: 'replication_unsafe back to 0', timeoutMs: 10_000, intervalMs: 100 },
      )
      const syncText = await metrics()
      expect(sample(syncText, 'tollgate_db_standbys{sync_state="sync"}')).toBe(1)
      expect(sample(syncText, 'tollgate_db_standbys{sync_state="async"}')).toBe(0)
      const ready = await fetch(`${child.adminUrl}/readyz`)
      expect(ready.status).toBe(200)
      expect(((await ready.json()) as { status: string }).status).toBe('ready')
      expect(logLines(child.output()).map((l) => l.msg)).toContain('replication safe again')

      // The same proof, not taken while refused, is served now.
      const served = await call()
      expect(served.status, await served.clone().text()).toBe(200)
      expect(upstream.served.get(hash!)).toBe(1)
      if (prom)
        await waitFor(async () => ((await prom.alertState()) === 'inactive' ? true : null), {
          what: 'TollgateReplicationUnsafe inactive',
          timeoutMs: 20_000,
          intervalMs: 250,
          retryErrors: true,
        })

      // A role without pg_read_all_stats sees the standby but not its sync state: not judged safe, and the
      // detail names the grant; granted, it reads the synchronous standby.
      const admin = createSql(primary.url, { max: 1 })
      cleanups.push(() => admin.end({ timeout: 1 }))
      await admin`CREATE ROLE watcher LOGIN`
      const watcher = createSql(primary.url.replace('postgres@', 'watcher@'), { max: 1 })
      cleanups.push(() => watcher.end({ timeout: 1 }))
      const hidden = await readReplication(watcher)
      expect(hidden.standbys).toEqual([{ name: 'standby1', syncState: 'unknown' }])
      expect(judgeReplication(hidden)).toMatchObject({ kind: 'unsafe', reason: 'standby_state_hidden' })
      await admin`GRANT pg_read_all_stats TO watcher`
      expect(judgeReplication(await readReplication(watcher)).kind).toBe('safe')
    } finally {
      for (const c of cleanups.reverse()) await c().catch(() => {})
    }
  })
})

/** Prometheus on loopback, scraping `target` every second with deploy/alerts.yml, in a temporary directory. */
async function startPrometheus(
  target: string,
): Promise<{ alertState(): Promise<string>; stop(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-prom-'))
  const port = await freePort()
  const base = `http://127.0.0.1:${port}`
  writeFileSync(
    join(dir, 'prometheus.yml'),
    [
      'global:',
      '  scrape_interval: 1s',
      '  evaluation_interval: 1s',
      'rule_files:',
      `  - ${join(ROOT, 'deploy/alerts.yml')}`,
      'scrape_configs:',
      '  - job_name: tollgate',
      '    static_configs:',
      `      - targets: ['${target}']`,
      '',
    ].join('\n'),
  )
  const proc: ChildProcess = spawn(
    'prometheus',
    [
      `--config.file=${join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--storage.tsdb.retention.time=1h',
    ],
    { stdio: 'ignore' },
  )
  await waitFor(async () => ((await fetch(`${base}/-/ready`)).ok ? true : null), {
    what: 'Prometheus to be ready',
    timeoutMs: 20_000,
    intervalMs: 250,
    retryErrors: true,
  })
  return {
    async alertState() {
      const res = await fetch(`${base}/api/v1/alerts`)
      const body = (await res.json()) as {
        data: { alerts: Array<{ labels: { alertname: string }; state: string }> }
      }
      return (
        body.data.alerts.find((a) => a.labels.alertname === 'TollgateReplicationUnsafe')?.state ?? 'inactive'
      )
    },
    async stop() {
      if (proc.exitCode === null) {
        const exited = new Promise((r) => proc.once('exit', r))
        proc.kill('SIGTERM')
        await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))])
        if (proc.exitCode === null) proc.kill('SIGKILL')
      }
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
