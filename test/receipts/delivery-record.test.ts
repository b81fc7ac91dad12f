// Where a paid answer's delivery (its body's SHA-256 and length, which the signed final receipt attests) is
// recorded: on the call row when the answer ended before its capture was written, in a record apart when
// the capture went first (a streamed answer). And a receipt outlives its claim, which leaves with its day.
import { createHash } from 'node:crypto'
import { x402Client } from '@x402/core/client'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { createPublicClient, createWalletClient, erc20Abi, http } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { presentReceipt } from '../../src/data-plane/receipts.ts'
import type { ReceiptRow } from '../../src/db/calls.ts'
import type { Service } from '../../src/service.ts'
import { startOpenAiUpstream } from '../helpers/openai-upstream.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { registerMerchantKey, startBaseSepoliaChain, startBaseSepoliaService } from '../x402/harness.ts'

const SIGNING_KEY = '0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba'

describe('delivery record', () => {
  let chain: DevChain
  let svc: Service
  let upstream: Upstream
  let echoUrl: string
  let sseUrl: string
  let apiKey: string

  beforeAll(async () => {
    chain = await startBaseSepoliaChain({ payers: 6 })
    upstream = await startUpstream()
    svc = await startBaseSepoliaService(
      chain,
      chain.rpcUrl,
      // Settled after the call, explicitly: where a short answer's delivery is written depends on the capture
      // being written after its body (settling before the answer writes the capture before the head, so the
      // delivery is recorded apart: one more write per call, not yet folded into the capture).
      {
        proxy: { allow_private_upstreams: true },
        settlement: { before_answer: { enabled: false } },
      } as never,
      'warn',
      {
        RECEIPT_SIGNING_KEY: SIGNING_KEY,
      },
    )
    apiKey = await registerMerchantKey(svc.url, chain.payers[4]!.address, 'Delivered Co')
    const endpoint = async (path: string) =>
      (
        await callApi(svc.url, '/api/v1/endpoints', {
          key: apiKey,
          body: { upstream_url: `${upstream.url}${path}`, price: 0.01 },
        })
      ).body.metered_url as string
    echoUrl = await endpoint('/echo')
    sseUrl = await endpoint('/sse')
  })
  afterAll(async () => {
    await svc?.stop()
    await upstream?.close()
    await chain?.stop()
  })

  const pay = async (url: string, payerIndex: number) => {
    const client = new x402Client()
    registerExactEvmScheme(client, {
      signer: privateKeyToAccount(chain.payers[payerIndex]!.privateKey) as never,
    })
    const paid = await wrapFetchWithPayment(fetch, client)(url)
    expect(paid.status).toBe(200)
    const body = Buffer.from(await paid.arrayBuffer())
    return {
      receiptId: paid.headers.get('x-receipt-id')!,
      delivered: { body_sha256: createHash('sha256').update(body).digest('hex'), body_bytes: body.length },
    }
  }
  const receipt = async (id: string) => {
    const r = await fetch(`${svc.url}/receipts/${id}`)
    expect(r.status).toBe(200)
    return r.json()
  }
  const stored = async (receiptId: string) => {
    const [call] = await svc.sql<{ sha: string | null; bytes: string | null; apart: number }[]>`
      SELECT encode(body_sha256, 'hex') AS sha, body_bytes::text AS bytes,
             (SELECT count(*)::int FROM call_deliveries d WHERE d.receipt_id = ${receiptId}) AS apart
      FROM calls c WHERE id = ${`call_${receiptId.slice(5)}`}`
    return call!
  }

  it('a short answer: what it delivered rides on its call row, nothing is written apart', async () => {
    const { receiptId, delivered } = await pay(`${echoUrl}?q=short`, 0)
    await svc.flushCaptures()
    expect((await receipt(receiptId)).delivered).toEqual(delivered)
    expect(await stored(receiptId)).toEqual({
      sha: delivered.body_sha256,
      bytes: String(delivered.body_bytes),
      apart: 0,
    })
  })

  it('a streamed answer whose capture was written first: recorded apart, the same on its receipt', async () => {
    const { receiptId, delivered } = await pay(sseUrl, 1)
    // The capture (20 ms after the head) went long before the 400 ms stream ended; the record apart comes
    // with the next discovery flush (every 5 s).
    const final = await waitFor(
      async () => {
        const r = await receipt(receiptId)
        return r.delivered === null ? null : r
      },
      { timeoutMs: 15_000, what: 'the delivery recorded apart' },
    )
    expect(final.delivered).toEqual(delivered)
    expect(await stored(receiptId)).toEqual({ sha: null, bytes: null, apart: 1 })
  })

  it('a token-priced stream is captured when it ends: what it delivered rides on its call row', async () => {
    const openai = await startOpenAiUpstream({ events: 20 })
    try {
      const ep = await callApi(svc.url, '/api/v1/endpoints', {
        key: apiKey,
        body: {
          upstream_url: `${openai.url}/v1/chat/completions`,
          pricing: {
            model: 'usage',
            unit: 'tokens',
            max_price: 0.05,
            input_price_per_million: 2,
            output_price_per_million: 10,
          },
        },
      })
      expect(ep.status).toBe(201)
      // Paid by a transaction hash: a USDC transfer of the ceiling to the treasury, mined.
      const payer = privateKeyToAccount(chain.payers[5]!.privateKey)
      const wallet = createWalletClient({ account: payer, transport: http(chain.rpcUrl) })
      const hash = await wallet.writeContract({
        address: chain.usdcAddress,
        abi: erc20Abi,
        functionName: 'transfer',
        args: [svc.chain.treasury, 50_000n],
        chain: null,
      })
      await createPublicClient({ transport: http(chain.rpcUrl) }).waitForTransactionReceipt({ hash })
      const r = await fetch(ep.body.metered_url, {
        method: 'POST',
        headers: { 'x-payment': hash, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt', stream: true, messages: [] }),
      })
      expect(r.status).toBe(200)
      const body = Buffer.from(await r.arrayBuffer())
      await svc.flushCaptures()
      expect(await stored(r.headers.get('x-receipt-id')!)).toEqual({
        sha: createHash('sha256').update(body).digest('hex'),
        bytes: String(body.length),
        apart: 0,
      })
    } finally {
      await openai.close()
    }
  })

  it('a receipt outlives its claim: settled by the revenue its settlement booked', async () => {
    const { receiptId, delivered } = await pay(`${echoUrl}?q=outlives`, 2)
    await svc.flushCaptures()
    await svc.jobs.runNow('x402-settlement')
    const before = await receipt(receiptId)
    expect(before.settlement.status).toBe('settled')
    // What dropping the claim's closed day does to this one call: its claim is gone, the call stays.
    const gone = await svc.sql`
      DELETE FROM claims WHERE proof_key = (SELECT call_proof_key(proof_key, proof) FROM calls WHERE id = ${`call_${receiptId.slice(5)}`})`
    expect(gone.count).toBe(1)
    const after = await receipt(receiptId)
    expect(after).toMatchObject({
      id: receiptId,
      call_id: before.call_id,
      amount_atomic: '10000',
      delivered,
      settlement: { status: 'settled', transaction: null, error: null },
    })
    expect(after.signed.payload.bodySha256).toBe(delivered.body_sha256)
  })

  it('a call id shares its receipt id: found by the primary key; a call with its own receipt id still is', async () => {
    const { receiptId } = await pay(`${echoUrl}?q=ids`, 3)
    await svc.flushCaptures()
    const found = await receipt(receiptId)
    expect(found.call_id).toBe(`call_${receiptId.slice(5)}`)
    // A receipt id derived from its call's is stored as '', and the receipt id's index holds only the calls
    // whose ids differ from their receipt ids: none of these.
    const [stored] = await svc.sql<{ derived: number; indexed: number }[]>`
      SELECT count(*) FILTER (WHERE receipt_id = '')::int AS derived,
             count(*) FILTER (WHERE receipt_id <> '' AND substr(receipt_id, 6) <> substr(id, 6))::int AS indexed
      FROM calls`
    expect(stored!.derived).toBeGreaterThan(0)
    expect(stored!.indexed).toBe(0)
    // A call written before ids were shared: its receipt id is random of its own.
    const legacyReceipt = 'rcpt_LEGACY000000000000'
    await svc.sql`
      INSERT INTO calls (id, proof_key, endpoint_id, account_id, payer, amount_atomic, owner_share_atomic,
                         fee_atomic, upstream_status, method, receipt_id, scheme)
      SELECT 'call_OLDCALL00000000000', call_proof_key(proof_key, proof) || ':legacy', endpoint_id, account_id,
             call_payer(payer, payer_address), amount_atomic,
             owner_share_atomic, fee_atomic, upstream_status, method, ${legacyReceipt}, scheme
      FROM calls WHERE id = ${found.call_id}`
    const legacy = await receipt(legacyReceipt)
    expect(legacy).toMatchObject({
      id: legacyReceipt,
      call_id: 'call_OLDCALL00000000000',
      amount_atomic: '10000',
    })
    expect((await fetch(`${svc.url}/receipts/rcpt_OLDCALL00000000000`)).status).toBe(404)
    // A call written while the derived receipt id was still stored whole is found by its primary key.
    await svc.sql`
      INSERT INTO calls (id, proof_key, endpoint_id, account_id, payer, amount_atomic, owner_share_atomic,
                         fee_atomic, upstream_status, method, receipt_id, scheme)
      SELECT 'call_WHOLE0000000000000', call_proof_key(proof_key, proof) || ':whole', endpoint_id, account_id,
             call_payer(payer, payer_address), amount_atomic,
             owner_share_atomic, fee_atomic, upstream_status, method, 'rcpt_WHOLE0000000000000', scheme
      FROM calls WHERE id = ${found.call_id}`
    expect(await receipt('rcpt_WHOLE0000000000000')).toMatchObject({
      id: 'rcpt_WHOLE0000000000000',
      call_id: 'call_WHOLE0000000000000',
    })
  })

  it('without its claim, a transaction hash is settled by the transaction it names', () => {
    const hash = `0x${'ab'.repeat(32)}`
    const row = {
      id: 'call_x',
      proof_key: `tx:${hash}`,
      claim_kind: null,
      settled_revenue: false,
      created_at: new Date(0),
      amount_atomic: 1n,
      usage: null,
    } as unknown as ReceiptRow
    expect(presentReceipt(row).settlement).toMatchObject({ status: 'settled', transaction: hash })
  })
})
