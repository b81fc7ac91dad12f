// SPDX-License-Identifier: MIT
// The x402 `upto` Permit2 proxy, written for the dev chain with the interface of the x402 project's
// x402UptoPermit2Proxy (functions, events, errors, witness type string): the payer signs a Permit2 witness
// transfer naming this contract as spender and a witness {to, facilitator, validAfter}; only that facilitator
// may settle it, for any amount up to what was signed, and only to `to`. Installed with anvil_setCode at the
// address the published client signs for (0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002): the Permit2 address is
// a constant rather than the original's constructor-set immutable, and the reentrancy flag starts at zero
// in the copied storage, which this guard treats as "not entered".
pragma solidity ^0.8.24;

import {Permit2} from './Permit2.sol';

interface IERC20PermitLike {
  function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)
    external;
}

contract X402UptoPermit2Proxy {
  Permit2 public constant PERMIT2 = Permit2(0x000000000022D473030F116dDEE9F6B43aC78BA3);

  string public constant WITNESS_TYPE_STRING =
    'Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)';
  bytes32 public constant WITNESS_TYPEHASH = keccak256('Witness(address to,address facilitator,uint256 validAfter)');

  struct Witness {
    address to;
    address facilitator;
    uint256 validAfter;
  }

  struct EIP2612Permit {
    uint256 value;
    uint256 deadline;
    bytes32 r;
    bytes32 s;
    uint8 v;
  }

  event Settled();
  event SettledWithPermit();
  event EIP2612PermitFailedWithReason(address indexed token, address indexed owner, string reason);
  event EIP2612PermitFailedWithPanic(address indexed token, address indexed owner, uint256 errorCode);
  event EIP2612PermitFailedWithData(address indexed token, address indexed owner, bytes data);

  error InvalidPermit2Address();
  error InvalidDestination();
  error PaymentTooEarly();
  error InvalidOwner();
  error InvalidAmount();
  error Permit2612AmountMismatch();
  error ReentrancyGuardReentrantCall();
  error UnauthorizedFacilitator();
  error AmountExceedsPermitted();

  uint256 private _entered;

  modifier nonReentrant() {
    if (_entered == 1) revert ReentrancyGuardReentrantCall();
    _entered = 1;
    _;
    _entered = 0;
  }

  function settle(
    Permit2.PermitTransferFrom calldata permit,
    uint256 amount,
    address owner,
    Witness calldata witness,
    bytes calldata signature
  ) external nonReentrant {
    if (amount > permit.permitted.amount) revert AmountExceedsPermitted();
    if (msg.sender != witness.facilitator) revert UnauthorizedFacilitator();
    _settle(permit, amount, owner, witness, signature);
    emit Settled();
  }

  /// The EIP-2612 permit approves Permit2 first; its failure is logged, not fatal (the approval may exist).
  function settleWithPermit(
    EIP2612Permit calldata permit2612,
    Permit2.PermitTransferFrom calldata permit,
    uint256 amount,
    address owner,
    Witness calldata witness,
    bytes calldata signature
  ) external nonReentrant {
    if (amount > permit.permitted.amount) revert AmountExceedsPermitted();
    if (msg.sender != witness.facilitator) revert UnauthorizedFacilitator();
    if (permit2612.value != permit.permitted.amount) revert Permit2612AmountMismatch();
    address token = permit.permitted.token;
    try
      IERC20PermitLike(token).permit(
        owner,
        address(PERMIT2),
        permit2612.value,
        permit2612.deadline,
        permit2612.v,
        permit2612.r,
        permit2612.s
      )
    {} catch Error(string memory reason) {
      emit EIP2612PermitFailedWithReason(token, owner, reason);
    } catch Panic(uint256 errorCode) {
      emit EIP2612PermitFailedWithPanic(token, owner, errorCode);
    } catch (bytes memory data) {
      emit EIP2612PermitFailedWithData(token, owner, data);
    }
    _settle(permit, amount, owner, witness, signature);
    emit SettledWithPermit();
  }

  function _settle(
    Permit2.PermitTransferFrom calldata permit,
    uint256 amount,
    address owner,
    Witness calldata witness,
    bytes calldata signature
  ) private {
    if (amount == 0) revert InvalidAmount();
    if (owner == address(0)) revert InvalidOwner();
    if (witness.to == address(0)) revert InvalidDestination();
    if (block.timestamp < witness.validAfter) revert PaymentTooEarly();
    bytes32 witnessHash = keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.facilitator, witness.validAfter));
    PERMIT2.permitWitnessTransferFrom(
      permit,
      Permit2.SignatureTransferDetails({to: witness.to, requestedAmount: amount}),
      owner,
      witnessHash,
      WITNESS_TYPE_STRING,
      signature
    );
  }
}
