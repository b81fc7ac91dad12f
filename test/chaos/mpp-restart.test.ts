// The chaos round of the payments that came last: MPP's `evm` charge and the x402 facilitator's /settle.
// Payers using the published mppx client (`mppx/client` with its evm charge method, unchanged) pay a
// fixed-price endpoint at a steady rate through two instances on one private PostgreSQL server, which is
// restarted (fast, then a crash) while calls are in flight; then instance b's real server process is
// SIGKILLed under the same load (calls then go to a). A fault costs a call a 503 or a dropped connection,
// after which its client sends the same credential again (to the other instance). Meanwhile six x402 exact
// payloads are sent to /settle again and again on alternating instances through the same faults. Judged
// against what the counting upstream served: none twice, none paid and not served, none unpaid (apart, at most
// 2: a call b served whose capture was still in its memory at its SIGKILL, the one stated bound of
// docs/guarantees.md: in doubt, never settled, the payer not charged); every booked call's authorization settled once
// on chain, the payers' wallets moved by exactly their sum. /settle: one transfer per payload, the same
// answer on every retry. Reconcile exits 0, every running balance equals its entries.
import { existsSync } from 'node:fs'
import { x402Client } from '@x402/core/client'
import { decodePaymentRequiredHeader } from '@x402/core/http'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import { Credential } from 'mppx'
import { Mppx } from 'mppx/client'
import { evm } from 'mppx/evm/client'
import postgres from 'postgres'
import { createPublicClient, createWalletClient, type Hex, http, parseAbi } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { describe, expect, it } from 'vitest'
import { waitFor } from '../helpers/wait-for.ts'
import { startCountingUpstream } from './counting-upstream.ts'
import {
  balancesAgainstEntries,
  merchantEndpoint,
  runReconcile,
  startChaosWorld,
  startChildOn,
  startTwoChildren,
} from './harness.ts'

const PRICE_ATOMIC = 10_000n
/** The chain stands in for base-sepolia (the facilitator answers for a real network; mppx takes any). */
const BASE_SEPOLIA_USDC = '0x036CbD53842c5426634e7929541eC2318f3dCF7e'
/** x402 payloads the facilitator's /settle is sent, each again and again through the faults. */
const FAC_PAYLOADS = 6
/** Between two sends of one payload to /settle. */
const FAC_GAP_MS = 700
const PAYERS = 3
/** Each payer starts a call this often (one after another): a few calls a second in all on a shared machine. */
const CALL_GAP_MS = 100
const LOAD_MS = 15_000
/** A call's client gives up sending its credential again after this. */
const CALL_DEADLINE_MS = 30_000
const FUNDING_ATOMIC = 1_000n * PRICE_ATOMIC
const usdcAbi = parseAbi([
  'function transfer(address to, uint256 value) returns (bool)',
  'function balanceOf(address) view returns (uint256)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
  'function name() view returns (string)',
  'function version() view returns (string)',
])
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

interface Call {
  proof: string
  payer: number
  /** The credentials mppx signed for this call (a new challenge makes it sign again). */
  credentials: string[]
  outcome: 'served' | 'refused' | 'gave_up'
  status: number
  resent: number
  /** Each attempt: instance, status, when it ended (ms into the load). */
  trail: string[]
  /** An attempt on b was under way when b was SIGKILLed. */
  killedInFlight: boolean
}

describe.runIf(existsSync('/usr/lib/postgresql'))('chaos: MPP charge through restarts and a SIGKILL', () => {
  it('PostgreSQL restarted twice, an instance SIGKILLed: MPP calls served once, paid, settled once', async () => {
    const lines: string[] = []
    const log = (l: string) => lines.push(`${new Date().toISOString().slice(11, 23)} ${l}`)
    const cleanups: Array<() => Promise<unknown>> = []
    try {
      const { cluster, chain, upstream } = await startChaosWorld(
        { payers: 2, payerFunding: 1_000_000_000n, chainId: 84532, usdcAt: BASE_SEPOLIA_USDC },
        startCountingUpstream,
        cleanups,
      )
      const settings = {
        proxy: { allow_private_upstreams: true },
        chain: { poll_interval_ms: 200, rpc_timeout_ms: 2_000 },
        settlement: { interval_ms: 500, receipt_poll_ms: 100 },
        facilitator: { settle_wait_ms: 20_000 },
        log: { level: 'warn' },
      }
      const start = () => startChildOn(cluster, chain, settings, { NETWORK: 'base-sepolia' })
      const instances = await startTwoChildren(start, cleanups)
      const { key: merchantKey, ep } = await merchantEndpoint(instances[0]!.url, 'MPP Chaos Co', {
        upstream_url: `${upstream.url}/echo`,
        price: Number(PRICE_ATOMIC) / 1e6,
      })
      const path = `/m/${ep.id}`

      const reader = createPublicClient({ transport: http(chain.rpcUrl) })
      const funder = createWalletClient({
        account: privateKeyToAccount(chain.payers[0]!.privateKey),
        transport: http(chain.rpcUrl),
      })
      const read = (functionName: 'name' | 'version') =>
        reader.readContract({ address: chain.usdcAddress, abi: usdcAbi, functionName }) as Promise<string>
      const token = { name: await read('name'), version: await read('version') }
      const payers: Array<{ address: Hex; fetch: typeof fetch; sent: string[] }> = []
      for (let i = 0; i < PAYERS; i++) {
        const account = privateKeyToAccount(generatePrivateKey())
        await reader.waitForTransactionReceipt({
          hash: await funder.writeContract({
            address: chain.usdcAddress,
            abi: usdcAbi,
            functionName: 'transfer',
            args: [account.address, FUNDING_ATOMIC],
            chain: null,
          }),
        })
        // What the client put on the wire: the credential of each paid attempt.
        const sent: string[] = []
        const recording: typeof fetch = (input, init) => {
          const auth = new Headers(init?.headers).get('authorization')
          if (auth !== null) sent.push(auth)
          return fetch(input, init)
        }
        const mppx = Mppx.create({
          methods: [evm.charge({ account, authorization: token })],
          fetch: recording,
          polyfill: false,
        })
        payers.push({ address: account.address, fetch: mppx.fetch, sent })
      }

      // The facilitator's payloads: signed by the published x402 client for the metered 402's exact terms
      // (payTo the treasury), settled through /settle with the merchant's key.
      const facPayer = privateKeyToAccount(chain.payers[1]!.privateKey)
      const facBefore = await reader.readContract({
        address: chain.usdcAddress,
        abi: usdcAbi,
        functionName: 'balanceOf',
        args: [facPayer.address],
      })
      const x402 = new x402Client()
      registerExactEvmScheme(x402, { signer: facPayer as never })
      const facBodies: Array<{ nonce: Hex; body: string }> = []
      for (let i = 0; i < FAC_PAYLOADS; i++) {
        const r = await fetch(`${instances[0]!.url}${path}`)
        const required = decodePaymentRequiredHeader(r.headers.get('payment-required')!)
        await r.arrayBuffer()
        const exact = { ...required, accepts: required.accepts.filter((a) => a.scheme === 'exact') }
        const payload = await x402.createPaymentPayload(exact as never)
        facBodies.push({
          nonce: (payload.payload as { authorization: { nonce: Hex } }).authorization.nonce,
          body: JSON.stringify({
            x402Version: 2,
            paymentPayload: payload,
            paymentRequirements: exact.accepts[0],
          }),
        })
      }
      /** Per payload: every 200 answer's body as sent, and the sends that met a fault (503, no answer). */
      const facAnswers: string[][] = facBodies.map(() => [])
      let facFaulted = 0
      let facPending = 0
      const settleOnce = async (i: number, k: number) => {
        const r = await fetch(`${instanceUrl(k)}/api/v1/facilitator/settle`, {
          method: 'POST',
          headers: { authorization: `Bearer ${merchantKey}`, 'content-type': 'application/json' },
          body: facBodies[i]!.body,
        }).catch(() => null)
        const text = r ? await r.text().catch(() => null) : null
        if (r?.status !== 200 || text === null) {
          facFaulted++
          return
        }
        // Past the settle wait the answer is settlement_pending: not an outcome yet, a retry gets it.
        if ((JSON.parse(text) as { errorReason?: string }).errorReason === 'settlement_pending') facPending++
        else facAnswers[i]!.push(text)
      }

      const calls: Call[] = []
      let inFlight = 0
      const faultsInFlight: number[] = []
      let n = 0
      let bKilled = false
      const instanceUrl = (k: number) => instances[bKilled ? 0 : k % 2]!.url
      // One call: mppx pays the 402; a fault (503, dropped connection) costs a resend of the same credential,
      // alternating instances; a fault before any credential was signed costs a fresh try.
      const payOnce = async (p: number): Promise<Call> => {
        const id = n++
        const proof = `mpp-${id}`
        const payer = payers[p]!
        const call: Call = {
          proof,
          payer: p,
          credentials: [],
          outcome: 'gave_up',
          status: 0,
          resent: 0,
          trail: [],
          killedInFlight: false,
        }
        const note = (k: number, status: number, killedBefore: boolean) => {
          call.trail.push(`${k % 2 === 0 || killedBefore ? 'a' : 'b'}:${status}@${Date.now() - loadStarts}`)
          if (!killedBefore && bKilled && k % 2 === 1) call.killedInFlight = true
        }
        // A fault, or 409 payment_in_progress (Retry-After: 1, "do not pay again"): a claim whose commit
        // the instance never heard of (PostgreSQL went down around it) holds the credential until that
        // instance releases it (releaseUnacknowledgedClaims, once the database is back). Not for a call cut
        // by b's SIGKILL: its claim stays held by the dead process to the end of its lease (the bound below).
        const resendable = (status: number) =>
          status === 503 || status === 0 || (status === 409 && !call.killedInFlight)
        const deadline = Date.now() + CALL_DEADLINE_MS
        let k = id
        while (Date.now() < deadline) {
          const before = payer.sent.length
          const killedBefore = bKilled
          const r = await payer.fetch(`${instanceUrl(k)}${path}?p=${proof}`).catch(() => null)
          const status = r?.status ?? 0
          if (r) await r.arrayBuffer().catch(() => {})
          call.credentials.push(...payer.sent.slice(before))
          call.status = status
          note(k, status, killedBefore)
          if (status === 200) return { ...call, outcome: 'served' }
          if (status === 402 && call.credentials.length > 0) return { ...call, outcome: 'refused' }
          k++
          const credential = call.credentials.at(-1)
          if (credential === undefined || !resendable(status)) {
            await sleep(200)
            continue
          }
          // Sent again, as it was, until an instance answers something other than a fault.
          while (Date.now() < deadline) {
            call.resent++
            const killedBefore = bKilled
            const again = await fetch(`${instanceUrl(k)}${path}?p=${proof}`, {
              headers: { authorization: credential },
            }).catch(() => null)
            call.status = again?.status ?? 0
            if (again) await again.arrayBuffer().catch(() => {})
            note(k, call.status, killedBefore)
            if (call.status === 200) return { ...call, outcome: 'served' }
            if (!resendable(call.status)) return { ...call, outcome: 'refused' }
            k++
            await sleep(call.status === 409 ? 1_000 : 200)
          }
        }
        return call
      }
      const loadStarts = Date.now()
      const loadEnds = loadStarts + LOAD_MS
      const workers = payers.map(async (_, p) => {
        while (Date.now() < loadEnds) {
          inFlight++
          calls.push(await payOnce(p).finally(() => inFlight--))
          await sleep(CALL_GAP_MS)
        }
      })
      // /settle: payload i is first sent at i × 2 s (some first sends meet a fault), then again every
      // FAC_GAP_MS on alternating instances until the load ends.
      const settlers = facBodies.map(async (_, i) => {
        await sleep(i * 2_000)
        let k = i
        while (Date.now() < loadEnds) {
          await settleOnce(i, k++)
          await sleep(FAC_GAP_MS)
        }
      })
      // The faults, while calls are in flight.
      const faults = (async () => {
        const t0 = Date.now()
        // At its time, and then the moment a call is in flight (on a quiet machine a call takes a few
        // milliseconds beside a 100 ms gap: a fault at a fixed instant often found none, proving nothing).
        const at = async (ms: number) => {
          await sleep(Math.max(0, t0 + ms - Date.now()))
          for (const until = Date.now() + 2_000; inFlight === 0 && Date.now() < until; ) await sleep(1)
        }
        await at(3_000)
        faultsInFlight.push(inFlight)
        log(`pg restart fast (${inFlight} in flight)`)
        await cluster.restart('fast')
        await at(6_500)
        faultsInFlight.push(inFlight)
        log(`pg restart immediate (${inFlight} in flight)`)
        await cluster.restart('immediate')
        await at(10_000)
        const b = instances[1]!
        faultsInFlight.push(inFlight)
        log(`SIGKILL b pid ${b.pid} (${inFlight} in flight)`)
        bKilled = true
        await b.kill('SIGKILL')
      })()
      await Promise.all([...workers, ...settlers, faults])
      // Once more after the faults, on the instance left: every payload has its outcome.
      for (let i = 0; i < FAC_PAYLOADS; i++) await settleOnce(i, 0)
      const context = () => lines.join('\n')

      const served = calls.filter((c) => c.outcome === 'served')
      const refused = calls.filter((c) => c.outcome === 'refused')
      const gaveUp = calls.filter((c) => c.outcome === 'gave_up')
      const resent = calls.filter((c) => c.resent > 0).length
      const servedTwice = [...upstream.served.values()].filter((v) => v > 1).length
      const upstreamServed = new Set(upstream.served.keys())

      // The books: each call row of the payers, by its authorization's nonce.
      const db = postgres(cluster.url, { max: 1, onnotice: () => {} })
      cleanups.push(() => db.end())
      const addresses = payers.map((p) => p.address.toLowerCase())
      await waitFor(
        async () => {
          const [row] = await db<{ n: number }[]>`
            SELECT count(*)::int AS n FROM claims WHERE status = 'captured'
              AND settled_at IS NULL AND settlement_error IS NULL`
          return row!.n === 0
        },
        { timeoutMs: 60_000, intervalMs: 250, what: 'every served authorization settled' },
      )
      const rows = await db<{ proof_key: string; amount_atomic: string; scheme: string }[]>`
        SELECT call_proof_key(proof_key, proof) AS proof_key, amount_atomic::text, scheme FROM calls
        WHERE lower(call_payer(payer, payer_address)) IN ${db(addresses)}`
      const nonceOf = (credential: string) =>
        (Credential.deserialize(credential).payload as { nonce: Hex }).nonce
      const rowByNonce = new Map(rows.map((r) => [r.proof_key.split(':').at(-1)!, r]))
      // Served unpaid: the upstream served it and no call row carries one of its credentials.
      let servedUnpaid = 0
      /** Served by the killed process, its capture lost with it (the stated bound of docs/guarantees.md). */
      let servedUnpaidKilled = 0
      /** Of those, the ones nobody was answered: b died with the call in flight, its retry answered 409. */
      let servedUnansweredKilled = 0
      let paidNotServed = 0
      const nonceServed = new Set<string>()
      for (const c of calls) {
        const booked = c.credentials.map(nonceOf).filter((x) => rowByNonce.has(x))
        if (upstreamServed.has(c.proof)) {
          if (booked.length !== 1) {
            const keys = c.credentials.map((x) => `%${nonceOf(x)}`)
            const claims = await db<{ proof_key: string; status: string }[]>`
              SELECT proof_key, status FROM claims WHERE proof_key LIKE ANY(${keys})`
            log(
              `unpaid ${c.proof}: killed in flight ${c.killedInFlight}, ${c.credentials.length} credentials, trail ${c.trail.join(' ')}, claims ${JSON.stringify(claims)}`,
            )
            // Served by b, which was then SIGKILLed with its capture still in memory (written after
            // capture_flush_ms, or retried with a backoff of up to 5 s after a failed write while
            // PostgreSQL restarted): the one stated bound, allowed only in doubt (its claim 'claimed').
            const byB = c.killedInFlight || c.trail.findLast((t) => t.includes(':200@'))?.startsWith('b:')
            if (byB && claims.length === 1 && claims[0]!.status === 'claimed') {
              servedUnpaidKilled++
              if (c.outcome !== 'served') servedUnansweredKilled++
            } else servedUnpaid++
          }
          for (const x of booked) nonceServed.add(x)
        } else if (booked.length > 0) paidNotServed++
      }
      // Call rows whose nonce no served call sent (a row the client never saw served).
      paidNotServed += rows.filter((r) => !nonceServed.has(r.proof_key.split(':').at(-1)!)).length
      const notMpp = rows.filter((r) => r.scheme !== 'mpp-charge' || BigInt(r.amount_atomic) !== PRICE_ATOMIC)
      const [failed] = await db<{ n: number }[]>`
        SELECT count(*)::int AS n FROM claims WHERE settlement_error IS NOT NULL`
      // The chain: every served call's nonce used, no other credential's; the wallets moved by their sum.
      let usedNotServed = 0
      let servedNotUsed = 0
      for (const c of calls) {
        const payer = payers[c.payer]!.address
        for (const credential of c.credentials) {
          const nonce = nonceOf(credential)
          const used = await reader.readContract({
            address: chain.usdcAddress,
            abi: usdcAbi,
            functionName: 'authorizationState',
            args: [payer, nonce],
          })
          if (used && !nonceServed.has(nonce)) usedNotServed++
          if (!used && nonceServed.has(nonce)) servedNotUsed++
        }
      }
      let moved = 0n
      for (const p of payers) {
        const left = await reader.readContract({
          address: chain.usdcAddress,
          abi: usdcAbi,
          functionName: 'balanceOf',
          args: [p.address],
        })
        moved += FUNDING_ATOMIC - left
      }
      // The facilitator: one transfer per payload (its nonce used, the wallet moved by their sum), one claim
      // and one settlement row each, the same answer (success, its transaction) on every retry.
      let facUnused = 0
      for (const f of facBodies) {
        const used = await reader.readContract({
          address: chain.usdcAddress,
          abi: usdcAbi,
          functionName: 'authorizationState',
          args: [facPayer.address, f.nonce],
        })
        if (!used) facUnused++
      }
      const facLeft = await reader.readContract({
        address: chain.usdcAddress,
        abi: usdcAbi,
        functionName: 'balanceOf',
        args: [facPayer.address],
      })
      const facMoved = facBefore - facLeft
      const facDiffering = facAnswers.filter((a) => a.length === 0 || new Set(a).size !== 1).length
      const facNotSuccess = facAnswers.filter((a) => a.some((t) => JSON.parse(t).success !== true)).length
      const facTransactions = new Set(facAnswers.map((a) => (a[0] ? JSON.parse(a[0]).transaction : '')))
      const [fac] = await db<{ claims: number; rows: number }[]>`
        SELECT (SELECT count(*) FROM claims WHERE target_type = 'facilitator')::int AS claims,
               (SELECT count(*) FROM facilitator_settlements)::int AS rows`
      const reconcileExit = await runReconcile(cluster.url, chain, log)
      const balances = await balancesAgainstEntries(cluster.url)
      const report = [
        `mpp chaos: ${calls.length} calls (in flight at the faults: ${faultsInFlight.join(', ')}), ${served.length} served, ${refused.length} refused, ${gaveUp.length} gave up;`,
        `  ${resent} sent a credential again after a fault; upstream served ${upstreamServed.size}, twice ${servedTwice};`,
        `  served unpaid ${servedUnpaid} (+ ${servedUnpaidKilled} served by b, capture lost in its SIGKILL), paid not served ${paidNotServed}, rows ${rows.length} (${notMpp.length} not mpp-charge at the price);`,
        `  on chain: served not used ${servedNotUsed}, used not served ${usedNotServed}, moved ${moved} = ${BigInt(rows.length) * PRICE_ATOMIC}?;`,
        `facilitator: ${FAC_PAYLOADS} payloads, ${facAnswers.flat().length} answers (${facPending} pending, ${facFaulted} sends met a fault);`,
        `  differing ${facDiffering}, not success ${facNotSuccess}, claims ${fac!.claims}, settlement rows ${fac!.rows}, nonces unused ${facUnused}, moved ${facMoved};`,
        `  settlement errors ${failed!.n}, reconcile exit ${reconcileExit}, balances ${balances.checked} checked ${balances.drifted} drifted`,
      ].join('\n')
      const unpaidLines = lines.filter((l) => l.includes(' unpaid mpp-'))
      process.stdout.write(
        `\n${[report, ...unpaidLines, ...lines.filter((l) => l.includes('SIGKILL'))].join('\n')}\n`,
      )
      log(report)
      for (const c of [...refused, ...gaveUp]) log(`${c.proof}: ${c.outcome} ${c.status}`)
      // Throughput depends on the shared machine (11 to 84 calls seen); the faults landing in flight matter.
      expect(calls.length, context()).toBeGreaterThanOrEqual(2 * PAYERS)
      // The faults landed while calls were being paid.
      expect(faultsInFlight, context()).toHaveLength(3)
      expect(Math.max(...faultsInFlight), context()).toBeGreaterThan(0)
      // Every call ended served: a fault costs a retry, never the call.
      expect(gaveUp, context()).toHaveLength(0)
      // A call in flight on b when it was SIGKILLed keeps its claim there: sent again it is answered 409 (in
      // progress) and never served twice. That is the bound below (served by b, its capture lost), not a
      // good payment refused; any other refusal is.
      const inDoubt = refused.filter((c) => c.killedInFlight && c.status === 409)
      expect(
        refused.filter((c) => !inDoubt.includes(c)),
        context(),
      ).toHaveLength(0)
      expect(inDoubt.length, context()).toBeLessThanOrEqual(faultsInFlight[2]!)
      expect(resent, context()).toBeGreaterThan(0)
      // The upstream served every call answered served, and besides them only calls in doubt: b forwarded
      // them and was SIGKILLed before answering (seen in CI: one, its retry on a answered 409).
      expect(
        served.filter((c) => !upstreamServed.has(c.proof)),
        context(),
      ).toHaveLength(0)
      const unanswered = [...upstreamServed].filter((p) => !served.some((c) => c.proof === p))
      expect(
        unanswered.filter((p) => !inDoubt.some((c) => c.proof === p)),
        context(),
      ).toHaveLength(0)
      expect(unanswered, context()).toHaveLength(servedUnansweredKilled)
      expect(servedTwice, context()).toBe(0)
      expect(servedUnpaid, context()).toBe(0)
      // The one bound: a call b answered and died before capturing is the owner's loss, never the payer's.
      expect(servedUnpaidKilled, context()).toBeLessThanOrEqual(2)
      expect(paidNotServed, context()).toBe(0)
      expect(rows, context()).toHaveLength(served.length - (servedUnpaidKilled - servedUnansweredKilled))
      expect(notMpp, context()).toHaveLength(0)
      expect(failed!.n, context()).toBe(0)
      expect(servedNotUsed, context()).toBe(0)
      expect(usedNotServed, context()).toBe(0)
      expect(moved, context()).toBe(BigInt(rows.length) * PRICE_ATOMIC)
      // The facilitator: each payload settled once, the same answer on every retry.
      expect(facFaulted, context()).toBeGreaterThan(0)
      expect(facDiffering, context()).toBe(0)
      expect(facNotSuccess, context()).toBe(0)
      expect(facTransactions.size, context()).toBeGreaterThan(0)
      expect(fac, context()).toEqual({ claims: FAC_PAYLOADS, rows: FAC_PAYLOADS })
      expect(facUnused, context()).toBe(0)
      expect(facMoved, context()).toBe(BigInt(FAC_PAYLOADS) * PRICE_ATOMIC)
      expect(reconcileExit, context()).toBe(0)
      expect(balances.checked, context()).toBeGreaterThan(0)
      expect(balances.drifted, context()).toBe(0)
    } finally {
      for (const c of cleanups.reverse()) await c().catch(() => {})
    }
  }, 240_000)
})
