// tk_stream.h: the C-simulation stream and dataflow region of tensorkiln's fpga_hls plugin.
//
// tk::stream<T> is a FIFO of a declared depth. Written and read through s[i] (the index
// must advance 0, 1, 2, ... as in the array code it replaces, else stream_error), or
// write()/read(). Inside a tk::dataflow region each stage is a thread: a write to a full
// stream waits for the consumer, a read from an empty one waits for the producer, and
// when every stage of the region waits, the region has deadlocked: the waiting calls
// throw stream_error naming the stream. Outside a region nothing can make progress
// while a call waits, so a read from an empty or a write to a full stream throws at once.
#ifndef TK_STREAM_H
#define TK_STREAM_H

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <algorithm>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tk {

struct stream_error : std::runtime_error {
    explicit stream_error(const std::string& what) : std::runtime_error(what) {}
};

// One lock for all streams and regions: C-simulation favours being obviously right.
struct sim_state {
    std::mutex mutex;
    std::condition_variable changed;
    int running = 0;    // stage threads that are not waiting
    int waiting = 0;    // stage threads waiting on a stream
    bool deadlock = false;
    std::vector<const std::function<bool()>*> waiters;   // what each waiting stage waits for

    // every stage waits and none of them can go on: no stage will ever change a stream again
    bool stuck() const {
        if (running > 0) return false;
        for (auto* ready : waiters) if ((*ready)()) return false;
        return true;
    }
    static sim_state& get() { static sim_state s; return s; }
};

inline thread_local bool in_stage = false;

template <typename T> class stream;

template <typename T> struct stream_ref {
    stream<T>& s;
    long index;
    void operator=(const T& v) { s.write_at(index, v); }
    operator T() { return s.read_at(index); }
};

template <typename T> class stream {
  public:
    explicit stream(const char* name = "stream", unsigned depth = 2) : name_(name), depth_(depth) {}

    void write(const T& v) {
        sim_state& st = sim_state::get();
        std::unique_lock<std::mutex> lock(st.mutex);
        wait_until(lock, [&] { return fifo_.size() < depth_; }, "write to a full");
        fifo_.push_back(v);
        st.changed.notify_all();
    }

    T read() {
        sim_state& st = sim_state::get();
        std::unique_lock<std::mutex> lock(st.mutex);
        wait_until(lock, [&] { return !fifo_.empty(); }, "read from an empty");
        T v = fifo_.front();
        fifo_.pop_front();
        st.changed.notify_all();
        return v;
    }

    stream_ref<T> operator[](long index) { return stream_ref<T>{*this, index}; }
    void write_at(long index, const T& v) { check_order(index, written_, "written"); write(v); }
    T read_at(long index) { check_order(index, read_, "read"); return read(); }

    bool empty() { std::lock_guard<std::mutex> lock(sim_state::get().mutex); return fifo_.empty(); }
    std::size_t size() { std::lock_guard<std::mutex> lock(sim_state::get().mutex); return fifo_.size(); }
    unsigned depth() const { return depth_; }

  private:
    void wait_until(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready, const char* what) {
        if (ready()) return;
        sim_state& st = sim_state::get();
        if (!in_stage) fail(what, " outside a dataflow region: nothing else can run");
        --st.running;
        ++st.waiting;
        st.waiters.push_back(&ready);
        auto leave = [&] {
            st.waiters.erase(std::find(st.waiters.begin(), st.waiters.end(), &ready));
            --st.waiting;
            ++st.running;
        };
        while (!ready()) {
            if (st.stuck()) { st.deadlock = true; st.changed.notify_all(); }
            if (st.deadlock) { leave(); fail(what, ": every dataflow stage waits (deadlock)"); }
            st.changed.wait(lock);
        }
        leave();
    }

    void check_order(long index, long& next, const char* how) {
        if (index != next)
            throw stream_error("stream " + name_ + ": element " + std::to_string(index) + " " + how +
                               " out of order (expected " + std::to_string(next) +
                               "); a stream is written and read once per element, in order");
        ++next;
    }

    [[noreturn]] void fail(const char* what, const char* why) {
        throw stream_error(std::string(what) + " stream " + name_ + " (depth " + std::to_string(depth_) + ", holding " +
                           std::to_string(fifo_.size()) + ")" + why);
    }

    std::string name_;
    unsigned depth_;
    std::deque<T> fifo_;
    long written_ = 0, read_ = 0;
};

// A dataflow region: spawn() starts a stage thread, join() waits for all and rethrows the
// first failure. The thread that opens the region counts as running until join(), so the
// first stages cannot be declared deadlocked while later ones are still being spawned.
class dataflow {
  public:
    dataflow() {
        sim_state& st = sim_state::get();
        std::lock_guard<std::mutex> lock(st.mutex);
        ++st.running;
        opened_ = true;
    }

    template <typename Stage> void spawn(Stage stage) {
        sim_state& st = sim_state::get();
        {
            std::lock_guard<std::mutex> lock(st.mutex);
            ++st.running;
        }
        threads_.emplace_back([this, stage]() {
            in_stage = true;
            try { stage(); } catch (...) { record(std::current_exception()); }
            sim_state& s = sim_state::get();
            std::lock_guard<std::mutex> lock(s.mutex);
            --s.running;
            s.changed.notify_all();
        });
    }

    void join() {
        close();
        for (auto& t : threads_) t.join();
        threads_.clear();
        sim_state& st = sim_state::get();
        { std::lock_guard<std::mutex> lock(st.mutex); st.deadlock = false; }
        if (failure_) { std::exception_ptr f = failure_; failure_ = nullptr; std::rethrow_exception(f); }
    }

    ~dataflow() {
        close();
        for (auto& t : threads_) if (t.joinable()) t.join();
    }

  private:
    void close() {
        if (!opened_) return;
        opened_ = false;
        sim_state& st = sim_state::get();
        std::lock_guard<std::mutex> lock(st.mutex);
        --st.running;
        st.changed.notify_all();
    }

    bool opened_ = false;
    void record(std::exception_ptr e) {
        std::lock_guard<std::mutex> lock(failure_mutex_);
        if (!failure_) failure_ = e;
    }
    std::vector<std::thread> threads_;
    std::mutex failure_mutex_;
    std::exception_ptr failure_;
};

}  // namespace tk

#endif  // TK_STREAM_H
