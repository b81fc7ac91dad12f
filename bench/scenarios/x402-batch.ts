// x402-batch: pay once, call many. One channel per connection, each opened with one deposit by the
// published @x402/evm batch-settlement client through @x402/fetch; then every request carries the channel's
// next cumulative voucher, signed before the load (each connection sends its channel's vouchers in order).
// Vouchers are signed with libsecp256k1 over the EIP-712 digest (the published signVoucher is ~1 ms each);
// the first of every channel is checked byte for byte against signVoucher's.
import { createRequire } from 'node:module'
import { x402Client } from '@x402/core/client'
import { BatchSettlementEvmScheme, computeChannelId, signVoucher } from '@x402/evm/batch-settlement/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { createPublicClient, type Hex, http, keccak256 } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { type ChannelConfig, voucherDigestBytes } from '../../src/chain/batch-channel.ts'
import { loadSequences, type Measured } from '../load.ts'
import { type Context, settings } from './context.ts'

const PRICE = 1000n

interface NativeSign {
  ecdsaSign(digest: Uint8Array, key: Uint8Array): { signature: Uint8Array; recid: number }
}

export async function runX402Batch(ctx: Context, perChannel: number): Promise<Measured> {
  const url = await ctx.tollgates.warm!.metered('/data', { batch: true })
  const caip2 = `eip155:${ctx.chain.chainId}` as const
  const privateKey = ctx.chain.payers[0]!.privateKey as Hex
  const account = privateKeyToAccount(privateKey)
  const publicClient = createPublicClient({ transport: http(ctx.chain.rpcUrl) })
  const signer = {
    address: account.address,
    signTypedData: (m: Parameters<typeof account.signTypedData>[0]) => account.signTypedData(m),
    readContract: (args: Parameters<typeof publicClient.readContract>[0]) => publicClient.readContract(args),
  }
  const probe = await fetch(url)
  const required = JSON.parse(Buffer.from(probe.headers.get('payment-required')!, 'base64').toString())
  const accepted = required.accepts.find((a: { scheme: string }) => a.scheme === 'batch-settlement')
  const channels = settings.connections
  const opened = performance.now()
  // One channel per connection (its own salt), opened at once: one deposit transaction each.
  const configs = await Promise.all(
    Array.from({ length: channels }, async (_, c) => {
      const salt = keccak256(Buffer.from(`x402-batch bench channel ${c} ${Date.now()}`))
      const scheme = new BatchSettlementEvmScheme(signer as never, {
        salt,
        depositPolicy: { depositMultiplier: perChannel + 1 },
      })
      const client = x402Client.fromConfig({
        schemes: [{ network: caip2, client: scheme }],
        spendControls: { allowedAssets: [{ network: caip2, asset: ctx.chain.usdcAddress }] },
      })
      const r = await wrapFetchWithPayment(fetch, client)(url)
      if (r.status !== 200) throw new Error(`x402-batch: opening channel ${c}: ${r.status} ${await r.text()}`)
      await r.arrayBuffer()
      return scheme.buildChannelConfig(accepted) as ChannelConfig
    }),
  )
  process.stdout.write(
    `  opened ${channels} channels (one deposit each) in ${Math.round(performance.now() - opened)} ms\n`,
  )
  const native = createRequire(import.meta.url)('secp256k1') as NativeSign
  const key = Buffer.from(privateKey.slice(2), 'hex')
  const signing = performance.now()
  const sequences: string[][] = []
  for (const config of configs) {
    const channelId = computeChannelId(config, caip2) as Hex
    const headers: string[] = []
    // The deposit call charged one price: the channel's vouchers go on from 2 × price.
    for (let i = 0; i < perChannel; i++) {
      const cumulative = BigInt(i + 2) * PRICE
      const { signature, recid } = native.ecdsaSign(
        voucherDigestBytes(ctx.chain.chainId, channelId, cumulative),
        key,
      )
      const sig = `0x${Buffer.from(signature).toString('hex')}${(27 + recid).toString(16)}`
      if (i === 0) {
        const published = await signVoucher(account, channelId, cumulative.toString(), caip2)
        if (published.signature !== sig)
          throw new Error('x402-batch: native voucher signature differs from signVoucher')
      }
      const payment = {
        x402Version: 2,
        accepted,
        payload: {
          type: 'voucher',
          channelConfig: config,
          voucher: { channelId, maxClaimableAmount: cumulative.toString(), signature: sig },
        },
      }
      headers.push(Buffer.from(JSON.stringify(payment)).toString('base64'))
    }
    sequences.push(headers)
  }
  process.stdout.write(
    `  signed ${channels} × ${perChannel} vouchers in ${Math.round(performance.now() - signing)} ms\n`,
  )
  // Answers other than 200 are in the result's wrong_status (printed with the scenario's line).
  const measured = await loadSequences({
    url,
    durationS: settings.durationS,
    header: 'payment-signature',
    sequences,
    expectStatus: 200,
  })
  return { ...measured, afterLoad: async () => ({ claims: await claimsDrained(ctx) }) }
}

/**
 * Waits until every channel's charged vouchers are claimed on chain and their calls booked (the warm
 * instance claims every second in the bench), so that work is not left to load the next scenario.
 */
async function claimsDrained(ctx: Context, timeoutMs = 90_000) {
  const started = performance.now()
  let unclaimed = await ctx.tollgates.warm!.unclaimedChannels()
  while (unclaimed !== null && unclaimed > 0 && performance.now() - started < timeoutMs) {
    // A polling period, not a wait for a condition that could be awaited.
    await new Promise((r) => setTimeout(r, 200))
    unclaimed = await ctx.tollgates.warm!.unclaimedChannels()
  }
  return { unclaimed_channels: unclaimed, drain_ms: Math.round(performance.now() - started) }
}
