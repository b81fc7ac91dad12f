// The chain half of an x402 verification on a real anvil: nonce unused, funds present, read through the
// hot path's own JSON-RPC reads (src/chain/token-reads.ts). Checks of one payer share the balance read in
// flight, and together accept no more than it: a burst of authorizations worth more than the wallet holds
// is served only up to what it holds.
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import {
  type Address,
  createWalletClient,
  encodeAbiParameters,
  type Hex,
  http,
  keccak256,
  numberToHex,
  parseAbi,
} from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { afterAll, describe, expect, it } from 'vitest'
import { createAuthorizationNonce, signTransferAuthorization } from '../../src/chain/authorization.ts'
import { createAuthorizationChainChecker } from '../../src/chain/check-authorization.ts'
import { settlementCalldata, storedAuthorization } from '../../src/chain/settle.ts'
import { createTokenReads, type TokenReads } from '../../src/chain/token-reads.ts'
import { readTokenInfo } from '../../src/chain/usdc.ts'
import { chainClients, fundedAccount, usdcBalance } from '../helpers/accounts.ts'
import oldTestUsdc from './fixtures/test-usdc-without-blacklist.json' with { type: 'json' }

const { rpcUrl, publicClient, usdc } = chainClients()
const opened: TokenReads[] = []
const servers: Server[] = []
afterAll(async () => {
  for (const r of opened) await r.close()
  for (const s of servers) s.close()
})

function reads(url = rpcUrl, onRpcRequest?: (request: string, calls: string[]) => void): TokenReads {
  const r = createTokenReads({ rpcUrl: url, token: usdc, timeoutMs: 10_000, onRpcRequest })
  opened.push(r)
  return r
}

/** Token reads whose balance reads are counted (what the checker asks for, before any batching). */
function countingReads() {
  const counted = { balanceReads: 0 }
  const inner = reads()
  return {
    counted,
    reads: {
      authorizationUsed: inner.authorizationUsed,
      blockNumber: inner.blockNumber,
      spendable: (owner: Address) => {
        counted.balanceReads++
        return inner.spendable(owner)
      },
    },
  }
}

const check = (
  checker: ReturnType<typeof createAuthorizationChainChecker>,
  from: Address,
  value: bigint,
  nonce: Hex = createAuthorizationNonce(),
) => checker({ from, nonce, value })

/** A stand-in RPC node answering every request with `answer` (status, body); it records the requests. */
async function fakeNode(answer: (body: string) => [number, string]) {
  const seen: Array<{ authorization: string | undefined; body: string }> = []
  const server = createServer((req, res) => {
    let body = ''
    req.on('data', (c) => (body += c))
    req.on('end', () => {
      seen.push({ authorization: req.headers.authorization, body })
      const [status, text] = answer(body)
      res.writeHead(status, { 'content-type': 'application/json' }).end(text)
    })
  })
  servers.push(server)
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  return { port: (server.address() as AddressInfo).port, seen }
}

describe('token reads', () => {
  it('answer what viem reads, in one HTTP request per turn of the event loop', async () => {
    const payer = await fundedAccount(123_456n)
    const requests: Array<[string, string[]]> = []
    const r = reads(rpcUrl, (request, calls) => requests.push([request, calls]))
    const nonce = createAuthorizationNonce()
    const [balance, used, other] = await Promise.all([
      r.balanceOf(payer.address),
      r.authorizationUsed(payer.address, nonce),
      r.balanceOf(privateKeyToAccount(generatePrivateKey()).address),
    ])
    expect([balance, used, other]).toEqual([123_456n, false, 0n])
    expect(requests).toEqual([['batch', ['eth_call', 'eth_call', 'eth_call']]])
    const [head, viaViem] = await Promise.all([
      r.blockNumber(),
      publicClient.getBlockNumber({ cacheTime: 0 }),
    ])
    expect(head).toBe(viaViem)

    // Use the nonce on chain: the same read now says so.
    const chainId = await publicClient.getChainId()
    const token = await readTokenInfo(publicClient, { address: usdc })
    const { authorization, signature } = await signTransferAuthorization(payer.account, {
      usdc: { address: usdc, name: token.name, version: token.version },
      chainId,
      to: payer.address,
      value: 1n,
      validAfter: 0n,
      validBefore: BigInt(Math.floor(Date.now() / 1000) + 600),
      nonce,
    })
    const wallet = createWalletClient({ account: payer.account, transport: http(rpcUrl) })
    const hash = await wallet.sendTransaction({
      to: usdc,
      data: settlementCalldata(storedAuthorization(authorization, signature)),
      chain: null,
    })
    await publicClient.waitForTransactionReceipt({ hash })
    expect(await r.authorizationUsed(payer.address, nonce)).toBe(true)
    expect(await usdcBalance(payer.address)).toBe(await r.balanceOf(payer.address))
  })

  it('reject on a node that errs, answers garbage, leaves a call out, or is not there; send URL credentials', async () => {
    const someone = privateKeyToAccount(generatePrivateKey()).address
    const down = await fakeNode(() => [500, 'oops'])
    await expect(reads(`http://127.0.0.1:${down.port}`).balanceOf(someone)).rejects.toThrow(/HTTP 500/)
    const garbage = await fakeNode(() => [200, '{"jsonrpc":"2.0","result":"0x01"}'])
    await expect(reads(`http://127.0.0.1:${garbage.port}`).balanceOf(someone)).rejects.toThrow(/array/)
    const short = await fakeNode(() => [200, '[{"jsonrpc":"2.0","id":0,"result":"0x01"}]'])
    await expect(reads(`http://127.0.0.1:${short.port}`).balanceOf(someone)).rejects.toThrow(/32-byte word/)
    const partial = await fakeNode(() => [200, `[{"jsonrpc":"2.0","id":0,"result":"0x${'0'.repeat(63)}7"}]`])
    const p = reads(`http://user:p%40ss@127.0.0.1:${partial.port}/key/abc`)
    const [first, second] = await Promise.allSettled([p.balanceOf(someone), p.balanceOf(someone)])
    expect(first).toEqual({ status: 'fulfilled', value: 7n })
    expect(second.status).toBe('rejected')
    expect(partial.seen[0]!.authorization).toBe(`Basic ${Buffer.from('user:p@ss').toString('base64')}`)
    await expect(reads('http://127.0.0.1:9').balanceOf(someone)).rejects.toThrow()
    await expect(reads().authorizationUsed(someone, '0x1234')).rejects.toThrow(/32-byte nonce/)
  })

  it('a turn with more reads than a batch may carry goes out as several batches, each answered in full', async () => {
    // A node like the hosted providers: a batch over its limit is refused whole (HTTP 413 here).
    const LIMIT = 100
    const node = await fakeNode((body) => {
      const calls = JSON.parse(body) as Array<{ id: number; params: [{ data: string }] }>
      if (calls.length > LIMIT) return [413, '{"error":"batch too large"}']
      // Each balanceOf answered with the last byte of the address it asks about: a word per call, by id.
      const answers = calls.map((c) => ({
        jsonrpc: '2.0',
        id: c.id,
        result: `0x${c.params[0].data.slice(-2).padStart(64, '0')}`,
      }))
      return [200, JSON.stringify(answers)]
    })
    const r = createTokenReads({ rpcUrl: `http://127.0.0.1:${node.port}`, token: usdc, timeoutMs: 10_000 })
    opened.push(r)
    const owners = Array.from(
      { length: 250 },
      (_, i) => `0x${(i % 256).toString(16).padStart(40, '0')}` as Address,
    )
    const balances = await Promise.all(owners.map((o) => r.balanceOf(o)))
    expect(balances).toEqual(owners.map((_, i) => BigInt(i % 256)))
    expect(node.seen.map((s) => (JSON.parse(s.body) as unknown[]).length)).toEqual([100, 100, 50])

    // The same turn against an uncapped reader is one batch, and the node refuses all of it.
    const uncapped = createTokenReads({
      rpcUrl: `http://127.0.0.1:${node.port}`,
      token: usdc,
      timeoutMs: 10_000,
      batchMax: 1000,
    })
    opened.push(uncapped)
    const refused = await Promise.allSettled(owners.map((o) => uncapped.balanceOf(o)))
    expect(refused.every((x) => x.status === 'rejected')).toBe(true)
  })
})

describe('x402 chain check', () => {
  it('five concurrent authorizations worth more than the balance: those that fit pass, one balance read', async () => {
    const payer = await fundedAccount(30_000n)
    const { reads, counted } = countingReads()
    const checker = createAuthorizationChainChecker(reads)

    const results = await Promise.all(Array.from({ length: 5 }, () => check(checker, payer.address, 10_000n)))
    expect(results.filter((r) => r.ok)).toHaveLength(3)
    expect(results.filter((r) => !r.ok && r.reason === 'insufficient_funds')).toHaveLength(2)
    expect(counted.balanceReads).toBe(1)
  })

  it('each payer has its own read; a check after the read is in starts a fresh one', async () => {
    const [a, b] = await Promise.all([fundedAccount(10_000n), fundedAccount(10_000n)])
    const { reads, counted } = countingReads()
    const checker = createAuthorizationChainChecker(reads)

    const both = await Promise.all([check(checker, a.address, 10_000n), check(checker, b.address, 10_000n)])
    expect(both.map((r) => r.ok)).toEqual([true, true])
    expect(counted.balanceReads).toBe(2)
    // Nothing was settled: the wallet still holds it, and a later check reads it again (the bound is per read).
    expect((await check(checker, a.address, 10_000n)).ok).toBe(true)
    expect(counted.balanceReads).toBe(3)
  })

  it("a kept read serves the payer's next checks with the block it reflects; forget() reads again", async () => {
    const a = await fundedAccount(10_000n)
    const { reads, counted } = countingReads()
    const checker = createAuthorizationChainChecker(reads, { balanceTtlMs: 60_000 })
    const head = await publicClient.getBlockNumber({ cacheTime: 0 })
    const first = await check(checker, a.address, 10_000n)
    if (!first.ok) throw new Error(first.reason)
    expect(first.balance.atomic).toBe(10_000n)
    // One block of margin below the head read beside it: never a block the balance may not reflect.
    expect(first.balance.block).toBeGreaterThanOrEqual(head - 1n)
    expect(first.balance.block).toBeLessThan(await publicClient.getBlockNumber({ cacheTime: 0 }))
    // The kept read is not an accepted sum: the claim (src/books/claims.ts) subtracts what is held.
    const again = await Promise.all([check(checker, a.address, 10_000n), check(checker, a.address, 10_000n)])
    expect(again.map((r) => r.ok)).toEqual([true, true])
    expect(counted.balanceReads).toBe(1)
    expect(await check(checker, a.address, 10_001n)).toEqual({ ok: false, reason: 'insufficient_funds' })
    // Refused for funds: the next check reads again (the payer may have topped up).
    await check(checker, a.address, 1n)
    expect(counted.balanceReads).toBe(2)
    checker.forget(a.address)
    await check(checker, a.address, 1n)
    expect(counted.balanceReads).toBe(3)
  })

  it('an empty wallet, and an unreachable node, are answers', async () => {
    const checker = createAuthorizationChainChecker(reads())
    const nobody = privateKeyToAccount(generatePrivateKey()).address
    expect(await check(checker, nobody, 1n)).toEqual({ ok: false, reason: 'insufficient_funds' })
    const down = createAuthorizationChainChecker(reads('http://127.0.0.1:9'))
    expect(await check(down, nobody, 1n)).toEqual({ ok: false, reason: 'rpc_unavailable' })
  })
})

/** isBlacklisted(address)'s selector, as the reads send it. */
const IS_BLACKLISTED = '0xfe575a87'

const blacklistAbi = parseAbi([
  'function owner() view returns (address)',
  'function blacklist(address account)',
  'function unBlacklist(address account)',
])

/** The token's blacklister (TestUSDC's deployer, as Circle's) lists or unlists `account`. */
async function setBlacklisted(account: Address, listed: boolean): Promise<void> {
  const owner = await publicClient.readContract({ address: usdc, abi: blacklistAbi, functionName: 'owner' })
  await publicClient.request({ method: 'anvil_impersonateAccount' as never, params: [owner] as never })
  try {
    const hash = await createWalletClient({ account: owner, transport: http(rpcUrl) }).writeContract({
      address: usdc,
      abi: blacklistAbi,
      functionName: listed ? 'blacklist' : 'unBlacklist',
      args: [account],
      chain: null,
    })
    await publicClient.waitForTransactionReceipt({ hash })
  } finally {
    await publicClient.request({
      method: 'anvil_stopImpersonatingAccount' as never,
      params: [owner] as never,
    })
  }
}

describe('a payer the token blacklists (USDC)', () => {
  it('can spend nothing: its funds read as 0, its authorization refused for funds, unlisted it pays', async () => {
    const payer = await fundedAccount(50_000n)
    const r = reads()
    expect(await r.spendable(payer.address)).toBe(50_000n)
    await setBlacklisted(payer.address, true)
    try {
      // Its balance is still there, frozen: the settlement of anything it signs would revert.
      expect(await r.balanceOf(payer.address)).toBe(50_000n)
      expect(await r.spendable(payer.address)).toBe(0n)
      const checker = createAuthorizationChainChecker(r)
      expect(await check(checker, payer.address, 10_000n)).toEqual({
        ok: false,
        reason: 'insufficient_funds',
      })
    } finally {
      await setBlacklisted(payer.address, false)
    }
    expect(await r.spendable(payer.address)).toBe(50_000n)
  })

  it('a token without isBlacklisted lists nobody: asked once, beside the balance, then not again', async () => {
    // FiatToken's surface without the blacklist (this project's TestUSDC of 2026-11-30), deployed afresh.
    const deployer = await fundedAccount(0n)
    const wallet = createWalletClient({ account: deployer.account, transport: http(rpcUrl) })
    const deployed = await publicClient.waitForTransactionReceipt({
      hash: await wallet.deployContract({ abi: [], bytecode: oldTestUsdc.bytecode as Hex, chain: null }),
    })
    const token = deployed.contractAddress!
    const owner = privateKeyToAccount(generatePrivateKey()).address
    const slot = keccak256(encodeAbiParameters([{ type: 'address' }, { type: 'uint256' }], [owner, 1n]))
    await publicClient.request({
      method: 'anvil_setStorageAt' as never,
      params: [token, slot, numberToHex(7_000n, { size: 32 })] as never,
    })
    const calls: string[][] = []
    const r = createTokenReads({ rpcUrl, token, timeoutMs: 10_000, onRpcRequest: (_, m) => calls.push(m) })
    opened.push(r)
    expect(await r.spendable(owner)).toBe(7_000n)
    expect(calls).toEqual([['eth_call', 'eth_call']])
    expect(await r.spendable(owner)).toBe(7_000n)
    expect(calls.at(-1)).toEqual(['eth_call'])
  })

  it('a token known to blacklist: a failed blacklist read is a failure (rpc_unavailable), not a no', async () => {
    let blacklistReads = 0
    const node = await fakeNode((body) => {
      const batch = JSON.parse(body) as Array<{ id: number; params: Array<{ data?: string }> }>
      const answers = batch.map((c) => {
        const isListedRead = c.params[0]?.data?.startsWith(IS_BLACKLISTED) === true
        // The first blacklist read answers "not listed"; the next ones are refused (a provider's limit).
        if (isListedRead && blacklistReads++ > 0)
          return { jsonrpc: '2.0', id: c.id, error: { code: -32005, message: 'rate limited' } }
        return { jsonrpc: '2.0', id: c.id, result: numberToHex(isListedRead ? 0n : 9_000n, { size: 32 }) }
      })
      return [200, JSON.stringify(answers)]
    })
    const r = reads(`http://127.0.0.1:${node.port}`)
    const someone = privateKeyToAccount(generatePrivateKey()).address
    expect(await r.spendable(someone)).toBe(9_000n)
    await expect(r.spendable(someone)).rejects.toThrow(/rate limited/)
    const checker = createAuthorizationChainChecker({
      ...r,
      blockNumber: async () => 1n,
      authorizationUsed: async () => false,
    })
    expect(await check(checker, someone, 1_000n)).toEqual({ ok: false, reason: 'rpc_unavailable' })
  })
})
