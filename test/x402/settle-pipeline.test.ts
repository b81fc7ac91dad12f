// Settle before the answer with several groups in flight on one settler: while a group's broadcast is
// unanswered (the node made slow by a proxy), the groups cut after it are signed, written with their hashes
// and broadcast too (the test fails with one group at a time); the nonces are consecutive and distinct, every
// transaction is mined, and each call's receipt names the transaction that carried its own authorization,
// checked on chain by the token's AuthorizationUsed log (authorizer and nonce) and its Transfer log of the
// payer's payment in that transaction. Default settings (settle before the answer), the x402 v1 client's
// header, a real anvil.
import { type Hash, type Hex, keccak256, parseAbi, parseEventLogs, type TransactionReceipt } from 'viem'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { decodePayment } from 'x402/schemes'
import { decodeXPaymentResponse } from 'x402-fetch'
import { GROUP_EVERY_MS } from '../../src/schemes/exact/group-cut.ts'
import { type RpcProxy, startRpcProxy } from '../helpers/rpc-proxy.ts'
import { startX402Setup, type X402Setup } from './harness.ts'

const CALLS = 40
/**
 * How long the node takes to answer each broadcast: the groups cut meanwhile pile up behind it. Longer than
 * the settler's busy cut interval (GROUP_EVERY_MS), so the next group is cut while the first is unanswered.
 */
const SLOW_BROADCAST_MS = GROUP_EVERY_MS + 250

const token = parseAbi([
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
  'event Transfer(address indexed from, address indexed to, uint256 value)',
])

let setup: X402Setup
let node: RpcProxy

beforeAll(async () => {
  setup = await startX402Setup({
    // Up to 50 authorizations a transaction (the default): each group of these 40 calls is one transaction.
    overrides: { settlement: { per_transaction: 50 } },
    rpcUrlFor: async (chainUrl) => {
      node = await startRpcProxy(chainUrl)
      return node.url
    },
    logLevel: 'error',
  })
})
afterAll(async () => {
  await setup?.stop()
  await node?.close()
})

/** The raw transactions a request broadcasts (viem batches its calls: a body may carry several). */
function rawTxsOf(body: string): Hex[] {
  const parsed = JSON.parse(body) as unknown
  const calls = (Array.isArray(parsed) ? parsed : [parsed]) as Array<{ method: string; params: [Hex] }>
  return calls.filter((c) => c.method === 'eth_sendRawTransaction').map((c) => c.params[0])
}

describe('settle before the answer: a pipeline of groups on one settler', () => {
  it('has groups in flight together, consecutive nonces, each receipt naming the transaction that carried it', async () => {
    const broadcast: Hash[] = []
    /** Groups of the settler at once between signed-and-written and answered by the node, at most. */
    let mostInFlight = 0
    let unanswered = 0
    node.beforeBroadcast = async (body) => {
      const hashes = rawTxsOf(body).map((raw) => keccak256(raw))
      unanswered += hashes.length
      // Hashes are recorded with their captures before their broadcast: the ones recorded and not yet
      // broadcast belong to transactions signed and written while these are sent; the ones broadcast and
      // not answered yet are on their way too.
      const recorded = await setup.svc.sql<{ tx: string }[]>`
        SELECT DISTINCT settlement_tx AS tx FROM claims WHERE settlement_tx IS NOT NULL`
      const ahead = recorded.filter((r) => ![...hashes, ...broadcast].includes(r.tx as Hash)).length
      mostInFlight = Math.max(mostInFlight, unanswered + ahead)
      broadcast.push(...hashes)
      await new Promise((r) => setTimeout(r, SLOW_BROADCAST_MS))
      unanswered -= hashes.length
    }
    const signed = await setup.sign(CALLS)
    // Served together: the calls arrive while the first group's broadcast is still out.
    const answers = await Promise.all(
      signed.map(async ({ header }, i) => {
        await new Promise((r) => setTimeout(r, i * 5))
        const r = await fetch(setup.meteredUrl, { headers: { 'X-PAYMENT': header } })
        await r.arrayBuffer()
        return { status: r.status, receipt: r.headers.get('x-payment-response'), header }
      }),
    )
    node.beforeBroadcast = null

    for (const a of answers) expect(a.status).toBe(200)
    // A group was signed, written or broadcast while an earlier one's broadcast was still unanswered.
    expect(mostInFlight).toBeGreaterThanOrEqual(2)

    const client = setup.svc.chain.publicClient
    const receipts = new Map<Hash, TransactionReceipt>()
    for (const a of answers) {
      const r = decodeXPaymentResponse(a.receipt!) as { success: boolean; transaction: Hash }
      expect(r.success).toBe(true)
      const { from, nonce } = (
        decodePayment(a.header).payload as { authorization: { from: Hex; nonce: Hex } }
      ).authorization
      let receipt = receipts.get(r.transaction)
      if (receipt === undefined) {
        receipt = await client.getTransactionReceipt({ hash: r.transaction })
        receipts.set(r.transaction, receipt)
      }
      expect(receipt.status).toBe('success')
      const logs = receipt.logs.filter(
        (l) => l.address.toLowerCase() === setup.chain.usdcAddress.toLowerCase(),
      )
      const used = parseEventLogs({ abi: token, logs, eventName: 'AuthorizationUsed' })
      expect(
        used.some(
          (l) =>
            l.args.authorizer.toLowerCase() === from.toLowerCase() && l.args.nonce === nonce.toLowerCase(),
        ),
      ).toBe(true)
      const transfers = parseEventLogs({ abi: token, logs, eventName: 'Transfer' })
      expect(
        transfers.some(
          (l) => l.args.from.toLowerCase() === from.toLowerCase() && l.args.value === setup.priceAtomic,
        ),
      ).toBe(true)
    }
    // Several transactions from one settler, at distinct consecutive nonces, every one broadcast and mined.
    expect(receipts.size).toBeGreaterThanOrEqual(2)
    const senders = new Set([...receipts.values()].map((r) => r.from.toLowerCase()))
    expect(senders.size).toBe(1)
    const nonces: number[] = []
    for (const hash of receipts.keys()) {
      nonces.push((await client.getTransaction({ hash })).nonce)
    }
    nonces.sort((a, b) => a - b)
    for (let i = 1; i < nonces.length; i++) expect(nonces[i]).toBe(nonces[0]! + i)
    expect(new Set(broadcast)).toEqual(new Set(receipts.keys()))
  })
})
