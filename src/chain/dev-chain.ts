// The local chain `NETWORK=local` runs on: anvil, the project's TestUSDC deployed from account 0 (the
// treasury), and USDC minted to the demo payers (accounts 1..N) and to the treasury.
import { mkdirSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import {
  type Address,
  type Chain,
  createWalletClient,
  defineChain,
  getContractAddress,
  type Hash,
  type HttpTransport,
  http,
  type PrivateKeyAccount,
  parseAbi,
  type WalletClient,
} from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { getCode, waitForTransactionReceipt } from 'viem/actions'
import { acquireLockFile, type HeldLock } from '../lock-file.ts'
import { anvilSetCode, spawnAnvil } from './anvil-process.ts'
import { installBatchSettlement } from './batch-channel.ts'
import { authorizationBatcherArtifact, testUsdcArtifact } from './contracts/artifacts.ts'
import { type DevAccount, devAccount } from './dev-accounts.ts'
import { ChainError } from './errors.ts'
import { AUTHORIZATION_BATCHER_ADDRESS } from './settle-batch.ts'
import { installUptoContracts } from './upto-settle.ts'

export type { DevAccount } from './dev-accounts.ts'

export interface DevChainOptions {
  /** Default 31337, anvil's own. */
  chainId?: number
  port?: number
  payers: number
  /** USDC base units minted to each payer. */
  payerFunding: bigint
  /** USDC base units minted to the treasury, so refunds and payouts work from the first minute. */
  treasuryFunding?: bigint
  /** Interval mining; default automine (a block per transaction, at once). */
  blockTimeSeconds?: number
  /** Gas per block (anvil's default 30 M otherwise). */
  gasLimit?: bigint
  /** Keep the chain in this file across restarts (locked to one process); default a fresh chain each time. */
  stateFile?: string
  /**
   * Put the test USDC at this address (anvil_setCode) instead of its deployment address: the canonical USDC
   * address of the network the chain stands in for, which published x402 clients accept without settings.
   */
  usdcAt?: Address
}

export interface DevChain {
  rpcUrl: string
  chainId: number
  usdcAddress: Address
  treasury: DevAccount
  payers: DevAccount[]
  pid: number
  /** True when the chain came back from its state file (contracts and balances kept, nothing redeployed). */
  restored: boolean
  stop(): Promise<void>
}

const mintAbi = parseAbi(['function mint(address to, uint256 amount) returns (bool)'])

/**
 * A fresh dev chain reproduces the same transactions, hence the same hashes, as the last one: a database
 * kept across restarts would refuse a new payment as already used. With a state file the chain survives
 * the restart instead, and the file is locked so two processes never run one chain file.
 */
function lockStateFile(stateFile: string | undefined): HeldLock | null {
  if (!stateFile) return null
  mkdirSync(dirname(resolve(stateFile)), { recursive: true })
  return acquireLockFile(`${resolve(stateFile)}.lock`, `the dev chain state ${stateFile}`)
}
const DEFAULT_TREASURY_FUNDING = 1_000_000_000_000n // 1,000,000 USDC

export async function startDevChain(options: DevChainOptions): Promise<DevChain> {
  const chainId = options.chainId ?? 31337
  const treasury = devAccount(0)
  const payers = Array.from({ length: options.payers }, (_, i) => devAccount(i + 1))
  const lock = lockStateFile(options.stateFile)
  let anvil: Awaited<ReturnType<typeof spawnAnvil>>
  try {
    anvil = await spawnAnvil({
      chainId,
      port: options.port,
      // anvil's default is 10 accounts; payers beyond account 9 need their ETH for gas too.
      accounts: Math.max(10, options.payers + 1),
      blockTimeSeconds: options.blockTimeSeconds,
      gasLimit: options.gasLimit,
      stateFile: options.stateFile,
    })
  } catch (err) {
    lock?.release()
    throw err
  }
  const stop = async () => {
    try {
      await anvil.stop()
    } finally {
      lock?.release()
    }
  }
  try {
    const chain = defineChain({
      id: chainId,
      name: 'tollgate local',
      nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
      rpcUrls: { default: { http: [anvil.rpcUrl] } },
    })
    const wallet = createWalletClient({
      chain,
      account: privateKeyToAccount(treasury.privateKey),
      transport: http(anvil.rpcUrl),
      pollingInterval: 50,
    })
    // Fresh chain, known sender: TestUSDC is its first transaction (nonce 0), so its address is known up front;
    // with usdcAt it is then moved to that address.
    const deployedUsdc = getContractAddress({ from: treasury.address, nonce: 0n })
    const usdcAddress = options.usdcAt ?? deployedUsdc
    // A chain restored from its state file already has them, and its payers' balances: nothing to send.
    const deployed = await getCode(wallet, { address: usdcAddress })
    // x402 batch-settlement: the project's own channel contracts at the addresses the client expects.
    await installBatchSettlement(anvil.rpcUrl)
    // x402 upto: Permit2 and the upto proxy at their canonical addresses, the treasury's settlement batcher.
    await installUptoContracts(anvil.rpcUrl, treasury.address)
    // x402 exact settlement, many authorizations per transaction, at its CREATE2 address.
    await anvilSetCode(
      anvil.rpcUrl,
      AUTHORIZATION_BATCHER_ADDRESS,
      authorizationBatcherArtifact.deployedBytecode,
    )
    if (deployed !== undefined && deployed !== '0x') {
      return {
        rpcUrl: anvil.rpcUrl,
        chainId,
        usdcAddress,
        treasury,
        payers,
        pid: anvil.pid,
        restored: true,
        stop,
      }
    }
    await deployAndFund(wallet, {
      deployedUsdc,
      usdcAddress,
      grants: [
        [treasury.address, options.treasuryFunding ?? DEFAULT_TREASURY_FUNDING],
        ...payers.map((p): [Address, bigint] => [p.address, options.payerFunding]),
      ],
      mineBlock: Boolean(options.blockTimeSeconds),
    })
    return {
      rpcUrl: anvil.rpcUrl,
      chainId,
      usdcAddress,
      treasury,
      payers,
      pid: anvil.pid,
      restored: false,
      stop,
    }
  } catch (err) {
    await stop()
    throw err
  }
}

/**
 * Deploys TestUSDC (nonce 0, at `deployedUsdc`; moved to `usdcAddress` when that differs) and mints the grants,
 * every transaction sent without waiting for the one before (the nonces are known), then waits for them all.
 */
async function deployAndFund(
  wallet: WalletClient<HttpTransport, Chain, PrivateKeyAccount>,
  p: { deployedUsdc: Address; usdcAddress: Address; grants: Array<[Address, bigint]>; mineBlock: boolean },
): Promise<void> {
  let nonce = 0
  const hashes: Hash[] = [
    await wallet.deployContract({
      abi: testUsdcArtifact.abi,
      bytecode: testUsdcArtifact.bytecode,
      nonce: nonce++,
      gas: 3_000_000n,
    }),
  ]
  if (p.usdcAddress !== p.deployedUsdc)
    await moveCode(wallet, hashes[0]!, p.deployedUsdc, p.usdcAddress, p.mineBlock)
  for (const [to, amount] of p.grants) {
    if (amount <= 0n) continue
    hashes.push(
      await wallet.writeContract({
        address: p.usdcAddress,
        abi: mintAbi,
        functionName: 'mint',
        args: [to, amount],
        nonce: nonce++,
        gas: 100_000n,
      }),
    )
  }
  // Interval mining: one block now rather than at the next tick.
  if (p.mineBlock) await wallet.request({ method: 'evm_mine' as never })
  for (const hash of hashes) {
    const receipt = await waitForTransactionReceipt(wallet, { hash, timeout: 30_000 })
    if (receipt.status !== 'success') {
      throw new ChainError('TOLLGATE_ANVIL_START_FAILED', `dev chain set-up transaction ${hash} reverted`)
    }
  }
}

/**
 * Copies a deployed contract's runtime code to another address. Its immutables (the token's minter) come
 * along in the code; its storage starts empty there, so the mints that follow go to the new address.
 */
async function moveCode(
  wallet: WalletClient<HttpTransport, Chain, PrivateKeyAccount>,
  deployment: Hash,
  from: Address,
  to: Address,
  mineBlock: boolean,
): Promise<void> {
  if (mineBlock) await wallet.request({ method: 'evm_mine' as never })
  await waitForTransactionReceipt(wallet, { hash: deployment, timeout: 30_000 })
  const code = await getCode(wallet, { address: from })
  if (!code || code === '0x')
    throw new ChainError('TOLLGATE_ANVIL_START_FAILED', 'the test USDC did not deploy')
  await wallet.request({ method: 'anvil_setCode' as never, params: [to, code] as never })
}

/**
 * Gives an account `wei` of the dev chain's ETH (anvil_setBalance): the settler slots of NETWORK=local, whose
 * keys are derived, so no one funded them. Only ever called on the local network (a real node refuses it).
 */
export async function fundDevGas(
  client: { request(args: { method: never; params: never }): Promise<unknown> },
  address: Address,
  wei: bigint,
): Promise<void> {
  await client.request({
    method: 'anvil_setBalance' as never,
    params: [address, `0x${wei.toString(16)}`] as never,
  })
}
