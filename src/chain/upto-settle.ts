// Settling x402 `upto` permits for what a call was charged (never above what the payer signed). The
// facilitator a permit names is the only account the upto proxy lets settle it: tollgate offers its
// UptoSettlementBatcher (one transaction for many permits; CREATE2 through the deterministic deployer, one
// address per settler; sent by the treasury or a settler slot it named delegate), or, on a chain without
// it, the treasury itself (one transaction per permit). Signed
// locally so the hash is recorded before anything is broadcast, as the other settlement paths do.
import {
  type Account,
  type Address,
  type Chain,
  type Client,
  concat,
  domainSeparator,
  encodeAbiParameters,
  encodeFunctionData,
  type Hash,
  type Hex,
  type PrivateKeyAccount,
  padHex,
  parseAbi,
  type TransactionReceipt,
  type Transport,
  toEventSelector,
  type WalletClient,
  zeroHash,
} from 'viem'
import { getCode, readContract, waitForTransactionReceipt } from 'viem/actions'
import { anvilSetCode, anvilSetStorageAt } from './anvil-process.ts'
import {
  permit2Artifact,
  uptoSettlementBatcherArtifact,
  x402UptoPermit2ProxyArtifact,
} from './contracts/artifacts.ts'
import { type Create2Deployment, create2Address, deployCreate2 } from './create2.ts'
import { keccakHex } from './keccak.ts'
import { dataWords, eventTopic, topicAddress, topicWord } from './log-words.ts'
import type { FeeQuote } from './payouts.ts'
import { signCall } from './sign-call.ts'
import { sameAddress } from './transfer.ts'
import { PERMIT2_ADDRESS, type StoredUptoPermit, UPTO_PROXY_ADDRESS } from './upto-permit.ts'

/** A permit and the amount it settles for: the call's charge, 0 < amount ≤ permit.amount. */
export interface UptoSettlementItem {
  permit: StoredUptoPermit
  amount: bigint
}

/** The batcher's creation code for one settler: its address, hence the facilitator payers sign, follows. */
function batcherInitCode(settler: Address): Hex {
  return concat([
    uptoSettlementBatcherArtifact.bytecode,
    encodeAbiParameters([{ type: 'address' }], [settler]),
  ])
}

export function uptoBatcherAddress(settler: Address): Address {
  return create2Address(batcherInitCode(settler))
}

/**
 * Dev chain: Permit2 and the upto proxy at their canonical addresses and the batcher at the settler's, as a
 * CREATE2 deployment would leave them (the batcher's constructor only writes the settler to slot 0).
 */
export async function installUptoContracts(rpcUrl: string, settler: Address): Promise<void> {
  const batcher = uptoBatcherAddress(settler)
  await anvilSetCode(rpcUrl, PERMIT2_ADDRESS, permit2Artifact.deployedBytecode)
  await anvilSetCode(rpcUrl, UPTO_PROXY_ADDRESS, x402UptoPermit2ProxyArtifact.deployedBytecode)
  await anvilSetCode(rpcUrl, batcher, uptoSettlementBatcherArtifact.deployedBytecode)
  await anvilSetStorageAt(rpcUrl, { address: batcher, slot: zeroHash, value: padHex(settler, { size: 32 }) })
}

const batcherAbi = parseAbi([
  'function settler() view returns (address)',
  'function delegates(address) view returns (bool)',
])

/** The storage slot of `delegates[account]` (the mapping sits in slot 1). */
function delegateSlot(account: Address): Hex {
  return keccakHex(encodeAbiParameters([{ type: 'address' }, { type: 'uint256' }], [account, 1n]))
}

/** Whether `account` (a settler slot) may settle through `batcher` for its settler. */
export async function isUptoDelegate(client: Client, batcher: Address, account: Address): Promise<boolean> {
  return readContract(client, {
    address: batcher,
    abi: batcherAbi,
    functionName: 'delegates',
    args: [account],
  })
}

/**
 * Real networks: the settler (the treasury) names `accounts` (its settler slots) delegates of its batcher,
 * in one transaction for those not named yet. Returns the transaction, or null when all were named.
 */
export async function delegateUptoSettlers(
  publicClient: Client,
  wallet: WalletClient<Transport, Chain | undefined, Account>,
  accounts: Address[],
): Promise<{ tx: Hash | null; named: number }> {
  const batcher = uptoBatcherAddress(wallet.account.address)
  const missing: Address[] = []
  for (const a of accounts) if (!(await isUptoDelegate(publicClient, batcher, a))) missing.push(a)
  if (missing.length === 0) return { tx: null, named: 0 }
  const tx = await wallet.sendTransaction({
    to: batcher,
    data: encodeFunctionData({
      abi: uptoSettlementBatcherArtifact.abi,
      functionName: 'setDelegates',
      args: [missing, true],
    }),
    chain: wallet.chain ?? null,
  })
  const receipt = await waitForTransactionReceipt(publicClient, { hash: tx })
  if (receipt.status !== 'success') throw new Error(`setDelegates ${tx} reverted`)
  return { tx, named: missing.length }
}

/**
 * Dev chain: lets `account` settle through `batcher`, as the settler's setDelegates would (anvil_setStorageAt;
 * the dev chain's treasury nonces stay the leader's). Real networks: the treasury sends setDelegates.
 */
export async function allowUptoDelegateOnDevChain(
  rpcUrl: string,
  batcher: Address,
  account: Address,
): Promise<void> {
  const value = padHex('0x01', { size: 32 })
  await anvilSetStorageAt(rpcUrl, { address: batcher, slot: delegateSlot(account), value })
}

/** True when this build's batcher for `settler` is on chain (its code, and its settler in storage). */
export async function hasUptoBatcher(client: Client, settler: Address): Promise<boolean> {
  const address = uptoBatcherAddress(settler)
  const code = await getCode(client, { address })
  if (code?.toLowerCase() !== uptoSettlementBatcherArtifact.deployedBytecode.toLowerCase()) return false
  const stored = await readContract(client, { address, abi: batcherAbi, functionName: 'settler' })
  return sameAddress(stored, settler)
}

/** Real networks: deploys the settler's batcher at its CREATE2 address, unless it is there already. */
export function deployUptoBatcher(
  publicClient: Client,
  wallet: WalletClient<Transport, Chain | undefined, Account>,
  settler: Address,
): Promise<Create2Deployment> {
  return deployCreate2(publicClient, wallet, {
    initCode: batcherInitCode(settler),
    present: () => hasUptoBatcher(publicClient, settler),
  })
}

function settleArgs(it: UptoSettlementItem) {
  const p = it.permit
  return {
    permit: {
      permitted: { token: p.token, amount: BigInt(p.amount) },
      nonce: BigInt(p.nonce),
      deadline: BigInt(p.deadline),
    },
    amount: it.amount,
    owner: p.from,
    witness: { to: p.to, facilitator: p.facilitator, validAfter: BigInt(p.validAfter) },
    signature: p.signature,
  }
}

/** The proxy's EIP2612Permit argument of an item's sponsored approval; a zero deadline: none. */
function approvalArgs(it: UptoSettlementItem) {
  const a = it.permit.permit2612
  if (a === undefined) return { value: 0n, deadline: 0n, r: zeroHash, s: zeroHash, v: 0 }
  const sig = a.signature
  return {
    value: BigInt(a.value),
    deadline: BigInt(a.deadline),
    r: `0x${sig.slice(2, 66)}` as Hex,
    s: `0x${sig.slice(66, 130)}` as Hex,
    v: Number.parseInt(sig.slice(130, 132), 16),
  }
}

/**
 * Gas of a batch: a batch of four on the dev chain used 273,801 (two settled, two refused by Permit2), so
 * 150k per permit plus 300k for the batch leaves room for cold storage; the contract attempts an item only
 * with ITEM_GAS (250k) left, which the 300k covers. A sponsored approval (the token's permit: a signature,
 * its nonce and the allowance written) adds up to 80k. Only the gas used is paid.
 */
export function uptoBatchGas(items: number, approvals = 0): bigint {
  return 300_000n + 150_000n * BigInt(items) + APPROVAL_GAS * BigInt(approvals)
}

const APPROVAL_GAS = 80_000n

/** Gas of one permit settled by the treasury through the proxy (and its approval, when it carries one). */
export const UPTO_DIRECT_GAS = 200_000n

/**
 * Signs one settlement transaction: through the batcher when the permits name it as facilitator, else one
 * permit straight to the proxy (the treasury is its facilitator). Every item must name `facilitator`.
 */
export async function signUptoSettlement(
  account: PrivateKeyAccount,
  p: { chainId: number; items: UptoSettlementItem[]; nonce: number; fees: FeeQuote },
): Promise<{ rawTx: Hex; hash: Hash }> {
  const first = p.items[0]
  if (!first) throw new RangeError('no upto permit to settle')
  const facilitator = first.permit.facilitator
  if (!p.items.every((it) => sameAddress(it.permit.facilitator, facilitator)))
    throw new RangeError('upto permits of one transaction must name the same facilitator')
  for (const it of p.items) {
    if (it.amount <= 0n || it.amount > BigInt(it.permit.amount))
      throw new RangeError(`upto settlement amount ${it.amount} outside (0, ${it.permit.amount}]`)
  }
  const direct = sameAddress(facilitator, account.address)
  if (direct && p.items.length !== 1)
    throw new RangeError('the treasury settles one upto permit per transaction')
  // Items with an eip2612GasSponsoring approval go through settleWithPermit (the batcher's
  // settleWithPermits): the approval is submitted first. Batches without one are encoded as before.
  const approvals = p.items.filter((it) => it.permit.permit2612 !== undefined).length
  const proxyArgs = (a: ReturnType<typeof settleArgs>) =>
    [a.permit, a.amount, a.owner, a.witness, a.signature] as const
  const data = direct
    ? approvals === 0
      ? encodeFunctionData({
          abi: x402UptoPermit2ProxyArtifact.abi,
          functionName: 'settle',
          args: proxyArgs(settleArgs(first)),
        })
      : encodeFunctionData({
          abi: x402UptoPermit2ProxyArtifact.abi,
          functionName: 'settleWithPermit',
          args: [approvalArgs(first), ...proxyArgs(settleArgs(first))],
        })
    : approvals === 0
      ? encodeFunctionData({
          abi: uptoSettlementBatcherArtifact.abi,
          functionName: 'settle',
          args: [p.items.map(settleArgs)],
        })
      : encodeFunctionData({
          abi: uptoSettlementBatcherArtifact.abi,
          functionName: 'settleWithPermits',
          args: [p.items.map(settleArgs), p.items.map(approvalArgs)],
        })
  return signCall(account, {
    ...p,
    to: direct ? UPTO_PROXY_ADDRESS : facilitator,
    data,
    gas: direct
      ? UPTO_DIRECT_GAS + APPROVAL_GAS * BigInt(approvals)
      : uptoBatchGas(p.items.length, approvals),
  })
}

const UPTO_SETTLED = toEventSelector('UptoSettled(address,uint256,uint256)')
const BATCH_SETTLED = toEventSelector('BatchSettled(uint256,uint256)')
const TRANSFER = toEventSelector('Transfer(address,address,uint256)')

export type UptoOutcome =
  | { status: 'settled'; amount: bigint }
  | { status: 'failed' }
  | { status: 'unattempted' }

/**
 * What a mined settlement transaction did to each permit, in order. Through the batcher: its UptoSettled log
 * names the permit and the amount moved (the payer's nonce is not enough: the payer may spend or invalidate
 * it elsewhere without paying us). Direct: the transaction succeeded and the token logged the transfer.
 * A batch that reverted as a whole, or ran short of gas before an item, left those items unattempted.
 */
export function uptoSettlementOutcomes(
  receipt: Pick<TransactionReceipt, 'status' | 'logs' | 'to'>,
  q: { items: UptoSettlementItem[] },
): UptoOutcome[] {
  const first = q.items[0]
  if (!first) return []
  const batch = receipt.to !== null && sameAddress(receipt.to, first.permit.facilitator)
  if (receipt.status !== 'success')
    return q.items.map(() => (batch ? { status: 'unattempted' } : { status: 'failed' }))
  if (!batch) {
    // Read by hand (./log-words.ts), as the batcher's events below.
    const p = first.permit
    const moved = receipt.logs.some((l) => {
      if (eventTopic(l.topics) !== TRANSFER || l.topics.length !== 3 || !sameAddress(l.address, p.token))
        return false
      const [from, to] = [topicAddress(l.topics[1]), topicAddress(l.topics[2])]
      const value = dataWords(l.data, 1)?.[0]
      return (
        from !== null &&
        to !== null &&
        sameAddress(from, p.from) &&
        sameAddress(to, p.to) &&
        value === first.amount
      )
    })
    return [moved ? { status: 'settled', amount: first.amount } : { status: 'failed' }]
  }
  const settled = new Map<string, bigint>()
  let attempted = 0
  for (const l of receipt.logs) {
    if (!sameAddress(l.address, first.permit.facilitator)) continue
    const topic = eventTopic(l.topics)
    if (topic === UPTO_SETTLED && l.topics.length === 3) {
      const owner = topicAddress(l.topics[1])
      const nonce = topicWord(l.topics[2])
      const amount = dataWords(l.data, 1)?.[0]
      if (owner !== null && nonce !== null && amount !== undefined) settled.set(`${owner}:${nonce}`, amount)
    } else if (topic === BATCH_SETTLED && l.topics.length === 1) {
      const words = dataWords(l.data, 2)
      if (words !== null) attempted = Number(words[0])
    }
  }
  return q.items.map((it, i) => {
    const amount = settled.get(`${it.permit.from.toLowerCase()}:${it.permit.nonce}`)
    if (amount !== undefined) return { status: 'settled', amount }
    return i < attempted ? { status: 'failed' } : { status: 'unattempted' }
  })
}

export type UptoContractsCheck = { ok: true } | { ok: false; reason: string }

const WITNESS_TYPE_STRING =
  'Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)'
const proxyReadAbi = parseAbi([
  'function PERMIT2() view returns (address)',
  'function WITNESS_TYPE_STRING() view returns (string)',
])

/**
 * Start-up check of Permit2 and the upto proxy at their canonical addresses: Permit2's domain separator is
 * the one tollgate verifies signatures against, and the proxy names that Permit2 and signs the witness type
 * the published client signs. Contracts that answer otherwise would let tollgate serve permits that can
 * never be settled. Three eth_calls.
 */
export async function checkUptoContracts(
  client: Client,
  q: { chainId: number },
): Promise<UptoContractsCheck> {
  const separator = await readContract(client, {
    address: PERMIT2_ADDRESS,
    abi: parseAbi(['function DOMAIN_SEPARATOR() view returns (bytes32)']),
    functionName: 'DOMAIN_SEPARATOR',
  }).catch(() => null)
  const expected = domainSeparator({
    domain: { name: 'Permit2', chainId: q.chainId, verifyingContract: PERMIT2_ADDRESS },
  })
  if (separator !== expected) return { ok: false, reason: `Permit2 at ${PERMIT2_ADDRESS} has another domain` }
  const [permit2, witness] = await Promise.all([
    readContract(client, { address: UPTO_PROXY_ADDRESS, abi: proxyReadAbi, functionName: 'PERMIT2' }),
    readContract(client, {
      address: UPTO_PROXY_ADDRESS,
      abi: proxyReadAbi,
      functionName: 'WITNESS_TYPE_STRING',
    }),
  ]).catch(() => [null, null] as const)
  if (permit2 === null || !sameAddress(permit2, PERMIT2_ADDRESS) || witness !== WITNESS_TYPE_STRING)
    return { ok: false, reason: `no x402 upto proxy for this Permit2 at ${UPTO_PROXY_ADDRESS}` }
  return { ok: true }
}

/**
 * The account payers must name as their upto permit's facilitator: the settler's batcher where it is on
 * chain, else the settler itself; null where Permit2 or the upto proxy are not as the published client
 * expects them (upto is not offered). As the metered upto scheme decides it at start-up.
 */
export async function uptoFacilitatorOf(
  client: Client,
  q: { chainId: number; settler: Address },
): Promise<Address | null> {
  const checked = await checkUptoContracts(client, { chainId: q.chainId })
  if (!checked.ok) return null
  return (await hasUptoBatcher(client, q.settler)) ? uptoBatcherAddress(q.settler) : q.settler
}
