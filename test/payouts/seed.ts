// Captured calls for payout tests, made fast but real: real USDC transfers payer → treasury on anvil (signed
// locally, one RPC each), their claims, then the data plane's own capture SQL (claimAndCapture) — the same rows
// a served metered call leaves behind.
import {
  type Address,
  createPublicClient,
  createWalletClient,
  encodeFunctionData,
  type Hex,
  http,
  keccak256,
} from 'viem'
import { expect, inject } from 'vitest'
import { type Capture, claimAndCapture } from '../../src/books/claims.ts'
import { insertAccount } from '../../src/db/accounts.ts'
import type { Sql } from '../../src/db/sql.ts'
import { newId } from '../../src/ids.ts'
import { splitOwnerShare } from '../../src/money.ts'
import { chainClients, erc20, type Funded, fundedAccount } from '../helpers/accounts.ts'
import { type ChildService, pidAlive, startChildService } from '../helpers/child-service.ts'

/** anvil's first account: the test USDC's minter, unlocked on the node. */
const DEPLOYER: Address = '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266'

export interface Owner {
  accountId: string
  wallet: Address
}

export interface SeededCall {
  owner: Owner
  payer: Funded
  hash: Hex
  amount: bigint
  ownerShare: bigint
  fee: bigint
}

export async function createOwners(sql: Sql, n: number): Promise<Owner[]> {
  const owners: Owner[] = []
  for (let i = 0; i < n; i++) {
    const wallet = (await fundedAccount(0n)).address
    const row = await insertAccount(sql, {
      id: newId('acct'),
      walletAddress: wallet,
      businessName: `Owner ${i}`,
      mode: 'test',
    })
    owners.push({ accountId: row.id, wallet })
  }
  return owners
}

/** A real mint (a Transfer to `to` the watcher sees): the one send from the deployer in the tests. */
export async function mintUsdc(to: Address, amount: bigint): Promise<void> {
  const { rpcUrl, publicClient, usdc } = chainClients()
  const deployer = createWalletClient({ account: DEPLOYER, transport: http(rpcUrl) })
  const hash = await deployer.writeContract({
    address: usdc,
    abi: erc20,
    functionName: 'mint',
    args: [to, amount],
    chain: null,
  })
  await publicClient.waitForTransactionReceipt({ hash })
}

/** Real transfers payer → treasury, sent concurrently across payers (each payer's nonces in order). */
export async function payTreasury(
  treasury: Address,
  plan: Array<{ payer: Funded; amount: bigint }>,
): Promise<Hex[]> {
  const rpcUrl = inject('rpcUrl')
  const chainId = inject('chainId')
  const usdc = inject('usdcAddress') as Address
  const client = createPublicClient({ transport: http(rpcUrl, { batch: { wait: 0 } }) })
  const block = await client.getBlock()
  const maxFeePerGas = (block.baseFeePerGas ?? 1_000_000_000n) * 3n + 1_000_000_000n
  const hashes: Hex[] = new Array(plan.length)
  const byPayer = new Map<Address, number[]>()
  plan.forEach((p, i) => {
    const list = byPayer.get(p.payer.address) ?? []
    list.push(i)
    byPayer.set(p.payer.address, list)
  })
  await Promise.all(
    [...byPayer.values()].map(async (indexes) => {
      const payer = plan[indexes[0]!]!.payer
      let nonce = await client.getTransactionCount({ address: payer.address, blockTag: 'pending' })
      for (const i of indexes) {
        const raw = await payer.account.signTransaction({
          type: 'eip1559',
          chainId,
          to: usdc,
          data: encodeFunctionData({
            abi: erc20,
            functionName: 'transfer',
            args: [treasury, plan[i]!.amount],
          }),
          nonce: nonce++,
          gas: 100_000n,
          maxFeePerGas,
          maxPriorityFeePerGas: 1_000_000_000n,
        })
        hashes[i] = keccak256(raw)
        await client.sendRawTransaction({ serializedTransaction: raw })
      }
    }),
  )
  // Automine: each is mined as it arrives; make sure the last of each payer is in.
  await Promise.all(
    [...byPayer.values()].map((indexes) =>
      client.waitForTransactionReceipt({ hash: hashes[indexes[indexes.length - 1]!]!, pollingInterval: 50 }),
    ),
  )
  return hashes
}

/** Claims for the hashes, then claimAndCapture (the data plane's capture statement) in batches of 256. */
export async function captureCalls(
  sql: Sql,
  calls: Array<{ owner: Owner; payer: Address; hash: Hex; amount: bigint }>,
  ownerShareBps = 9500,
): Promise<Array<{ ownerShare: bigint; fee: bigint }>> {
  const splits = calls.map((c) => splitOwnerShare(c.amount, ownerShareBps))
  for (let i = 0; i < calls.length; i += 1000) {
    const chunk = calls.slice(i, i + 1000)
    await sql`
      INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                          retry_until, proof_at, horizon_at)
      SELECT k, 'tx', 'call', 'ep_seeded', acct, payer, amt, 'claimed', now() + interval '10 minutes', now(), now()
      FROM unnest(${chunk.map((c) => `tx:${c.hash.toLowerCase()}`)}::text[],
                  ${chunk.map((c) => c.owner.accountId)}::text[], ${chunk.map((c) => c.payer)}::text[],
                  ${chunk.map((c) => c.amount.toString())}::bigint[]) AS t(k, acct, payer, amt)`
  }
  const captures: Capture[] = calls.map((c, i) => ({
    callId: newId('call'),
    proofKey: `tx:${c.hash.toLowerCase()}`,
    endpointId: 'ep_seeded',
    accountId: c.owner.accountId,
    ownerWallet: c.owner.wallet,
    payer: c.payer,
    amountAtomic: c.amount,
    ownerShareAtomic: splits[i]!.owner,
    feeAtomic: splits[i]!.fee,
    upstreamStatus: 200,
    method: 'GET',
  }))
  for (let i = 0; i < captures.length; i += 256) {
    const n = (await claimAndCapture(sql, { claims: [], captures: captures.slice(i, i + 256) })).captured.size
    if (n !== Math.min(256, captures.length - i)) throw new Error(`captured ${n} calls`)
  }
  return splits.map((s) => ({ ownerShare: s.owner, fee: s.fee }))
}

/** Paid, captured calls spread over owners and payers, with varied prices (rounding of the 95% matters). */
export async function seedPaidCalls(
  sql: Sql,
  o: { treasury: Address; owners: Owner[]; payers: Funded[]; calls: number },
): Promise<SeededCall[]> {
  const plan = Array.from({ length: o.calls }, (_, i) => ({
    owner: o.owners[i % o.owners.length]!,
    payer: o.payers[(i * 7) % o.payers.length]!,
    amount: 10_000n + BigInt((i * 7919) % 4999),
  }))
  const hashes = await payTreasury(o.treasury, plan)
  const splits = await captureCalls(
    sql,
    plan.map((p, i) => ({ owner: p.owner, payer: p.payer.address, hash: hashes[i]!, amount: p.amount })),
  )
  return plan.map((p, i) => ({
    ...p,
    hash: hashes[i]!,
    ownerShare: splits[i]!.ownerShare,
    fee: splits[i]!.fee,
  }))
}

export function sumBy<T>(items: T[], f: (t: T) => bigint): bigint {
  return items.reduce((s, t) => s + f(t), 0n)
}

/**
 * The batcher started on this database with TOLLGATE_FAULT_POINT `point`: it SIGKILLs its own server process
 * there (the child we spawned is node, not a wrapper). Waits for that, 30 s at most, and checks it is gone.
 */
export async function killedAtFaultPoint(
  options: { databaseUrl: string; treasuryKey: Hex; point: string; settings: Record<string, unknown> },
  cleanups: Array<() => Promise<void>>,
): Promise<ChildService> {
  const child = await startChildService({
    databaseUrl: options.databaseUrl,
    treasuryKey: options.treasuryKey,
    env: { TOLLGATE_FAULT_POINT: options.point },
    settings: options.settings,
  })
  cleanups.push(() => child.kill('SIGKILL'))
  const exit = await Promise.race([child.exited, new Promise((r) => setTimeout(() => r('timeout'), 30_000))])
  expect(exit, child.output()).toBe('SIGKILL')
  expect(pidAlive(child.pid)).toBe(false)
  return child
}
