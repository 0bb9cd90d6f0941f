// The simulated device: capacity, address plan, virtual memory, events and fault injection.
#include "test_support.h"

using namespace vramtrace;

TEST_CASE("the simulated device charges whole pages and refuses what does not fit") {
  SimulatedDevice::Options o;
  o.capacity_bytes = 10 * kMiB;
  SimulatedDevice dev(o);
  DevicePtr a = 0, b = 0;
  REQUIRE(dev.allocate(1, &a) == Status::ok);
  CHECK(dev.used_bytes() == 2 * kMiB);
  CHECK(dev.allocate(9 * kMiB, &b) == Status::out_of_memory);
  REQUIRE(dev.allocate(8 * kMiB, &b) == Status::ok);
  CHECK(b != a);
  CHECK(dev.mem_info().free_bytes == 0);
  CHECK(dev.deallocate(a + 1, 1) == Status::invalid_value);
  CHECK(dev.deallocate(a, 1) == Status::ok);
  CHECK(dev.mem_info().free_bytes == 2 * kMiB);
}

TEST_CASE("fault injection fails the Nth device allocation") {
  SimulatedDevice::Options o;
  o.fail_nth_allocation = 2;
  SimulatedDevice dev(o);
  DevicePtr p = 0;
  CHECK(dev.allocate(kMiB, &p) == Status::ok);
  CHECK(dev.allocate(kMiB, &p) == Status::out_of_memory);
  CHECK(dev.allocate(kMiB, &p) == Status::ok);

  // The allocator turns an injected failure into release + retry, then an OOM.
  SimulatedDevice::Options o2;
  o2.fail_after_allocations = 1;
  SimulatedDevice dev2(o2);
  CachingAllocator alloc(dev2, AllocatorSettings{});
  REQUIRE(alloc.allocate(30 * kMiB, {}, &p) == Status::ok);
  DevicePtr q = 0;
  CHECK(alloc.allocate(30 * kMiB, {}, &q) == Status::out_of_memory);
  CHECK(alloc.stats().num_alloc_retries == 1);
  std::string error;
  CHECK(alloc.check_invariants(error));
}

TEST_CASE("the address plan places allocations where the recorded run had them") {
  SimulatedDevice::Options o;
  o.address_plan = {{4 * kMiB, 0x7f0000400000}, {2 * kMiB, 0x7f0000000000}};
  SimulatedDevice dev(o);
  DevicePtr a = 0, b = 0, c = 0;
  REQUIRE(dev.allocate(4 * kMiB, &a) == Status::ok);
  REQUIRE(dev.allocate(2 * kMiB, &b) == Status::ok);
  CHECK(a == 0x7f0000400000);
  CHECK(b == 0x7f0000000000);
  dev.plan_address(2 * kMiB, 0x7f0000200000);
  dev.plan_address(8 * kMiB, 0x7f0001000000);
  REQUIRE(dev.allocate(2 * kMiB, &c) == Status::ok);
  CHECK(c == 0x7f0000200000);
  DevicePtr d = 0;
  REQUIRE(dev.allocate(6 * kMiB, &d) == Status::ok);  // size differs: the plan is abandoned
  CHECK(d >= o.base_address);
  dev.plan_address(2 * kMiB, 0x7f0002000000);
  DevicePtr e = 0;
  REQUIRE(dev.allocate(2 * kMiB, &e) == Status::ok);
  CHECK(e != 0x7f0002000000);
}

TEST_CASE("virtual memory maps pages inside reservations only") {
  SimulatedDevice::Options o;
  o.capacity_bytes = 10 * kMiB;
  SimulatedDevice dev(o);
  DevicePtr base = 0;
  REQUIRE(dev.reserve_address(100 * kMiB, &base) == Status::ok);
  CHECK(dev.map(base, 4 * kMiB) == Status::ok);
  CHECK(dev.map(base, 2 * kMiB) == Status::invalid_value);  // already mapped
  CHECK(dev.map(base + 4 * kMiB, 8 * kMiB) == Status::out_of_memory);
  CHECK(dev.map(base + 1, 2 * kMiB) == Status::invalid_value);
  CHECK(dev.release_address(base, 100 * kMiB) == Status::invalid_value);  // still mapped
  CHECK(dev.unmap(base + 2 * kMiB, 2 * kMiB) == Status::ok);
  CHECK(dev.used_bytes() == 2 * kMiB);
  CHECK(dev.unmap(base, 2 * kMiB) == Status::ok);
  CHECK(dev.release_address(base, 100 * kMiB) == Status::ok);
}
