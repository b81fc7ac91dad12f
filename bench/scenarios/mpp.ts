// mpp-charge: each request carries a fresh MPP credential (`Authorization: Payment`, the `evm` charge: an
// EIP-3009 authorization whose nonce is its challenge's hash), built before the load by the published mppx
// client's own credential building (the evm charge method's createCredential) from the challenge of one 402
// each: a challenge is answered once. The same for tollgate and for MPP's reference server (mppx/express).
import { Challenge } from 'mppx'
import { evm } from 'mppx/evm/client'
import { type Address, createPublicClient, type Hex, http, parseAbi } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { load, type Measured } from '../load.ts'
import { type Context, settings } from './context.ts'
import { inside, readCounters, settlementOutcome } from './inside.ts'

const tokenAbi = parseAbi([
  'function name() view returns (string)',
  'function version() view returns (string)',
])

/** `count` credentials for `url`, each answering the challenge of its own 402. */
async function credentials(ctx: Context, url: string, count: number): Promise<string[] | string> {
  const client = createPublicClient({ transport: http(ctx.chain.rpcUrl) })
  const read = (functionName: 'name' | 'version') =>
    client.readContract({ address: ctx.chain.usdcAddress as Address, abi: tokenAbi, functionName })
  const token = { name: await read('name'), version: await read('version') }
  const method = evm.charge({
    account: privateKeyToAccount(ctx.chain.payers[0]!.privateKey as Hex),
    authorization: token,
  })
  const started = performance.now()
  const out: string[] = []
  // mppx's server derives a challenge's id from its terms and expiry (to the millisecond), and its evm charge
  // client the EIP-3009 nonce from the challenge: 402s answered in the same millisecond give one payer the same
  // authorization twice, and the second settlement reverts. Each credential here has a challenge of its own.
  const seen = new Set<string>()
  while (out.length < count) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(50, count - out.length) }, async () => {
        const r = await fetch(url)
        await r.arrayBuffer()
        if (r.status !== 402) return null
        const challenge = Challenge.fromResponse(r)
        if (seen.has(challenge.id)) return ''
        seen.add(challenge.id)
        return (await method.createCredential({ challenge, context: {} } as never)) as string
      }),
    )
    for (const c of batch) {
      if (c === null) return `${url} answered an unpaid call with another status than 402`
      if (c !== '') out.push(`Payment ${c.replace(/^Payment\s+/i, '')}`)
    }
  }
  process.stdout.write(
    `  built ${count} mppx credentials (one 402 each) in ${Math.round(performance.now() - started)} ms\n`,
  )
  return out
}

/**
 * On `x402-after`'s endpoint (`x402_settlement: "after"`): an MPP charge is always settled after its answer,
 * in the leader's batches, so its like-for-like peer is `x402-after` (`ratio_to_x402_after`), not `x402`,
 * which settles before the answer by default.
 */
/** Credentials built by `prepareMpp` for a URL, taken by the next run on it. */
const prepared = new Map<string, string[] | string>()

/**
 * Builds a run's credentials before its CPU meter starts: each costs the target a 402, which the measured
 * run must not be charged (an x402 run signs from one 402 and costs the target nothing before its load).
 */
export async function prepareMpp(ctx: Context, target: 'tollgate' | 'reference', count: number) {
  const url = target === 'tollgate' ? await mppChargeUrl(ctx) : `${ctx.mppReference!.base}/data`
  prepared.set(url, await credentials(ctx, url, count))
}

function mppChargeUrl(ctx: Context): Promise<string> {
  return ctx.tollgates.warm!.metered('/data', { settleAfter: true })
}

async function take(ctx: Context, url: string, count: number): Promise<string[] | string> {
  const ready = prepared.get(url)
  prepared.delete(url)
  return ready ?? credentials(ctx, url, count)
}

export async function runMppCharge(ctx: Context, count: number): Promise<Measured | { skipped: string }> {
  const t = ctx.tollgates.warm!
  const url = await mppChargeUrl(ctx)
  const values = await take(ctx, url, count)
  if (typeof values === 'string') return { skipped: values }
  const before = await readCounters(t.adminPort)
  const m = await load({
    url,
    connections: settings.connections,
    durationS: settings.durationS,
    perRequest: { header: 'authorization', values },
    expectStatus: 200,
  })
  const over = (peer: string) => {
    const rps = ctx.rps.get(peer)
    return rps ? Math.round((m.rps / rps) * 1000) / 1000 : null
  }
  return {
    ...m,
    inside: inside(before, await readCounters(t.adminPort)),
    ratio_to_x402: over('x402'),
    ratio_to_x402_after: over('x402-after'),
    ratio_to_mpp_reference: over('mpp-reference'),
    afterLoad: async () => ({ settlement: await settlementOutcome(t.adminPort, before) }),
  }
}

export async function runMppReference(ctx: Context, count: number): Promise<Measured | { skipped: string }> {
  const url = `${ctx.mppReference!.base}/data`
  const values = await take(ctx, url, count)
  if (typeof values === 'string') return { skipped: values }
  return load({
    url,
    connections: settings.connections,
    durationS: settings.durationS,
    perRequest: { header: 'authorization', values },
    expectStatus: 200,
  })
}
