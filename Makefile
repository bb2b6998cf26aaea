# Native parts of memq. `make native` builds both shared libraries into LIBDIR
# (default: ctf2perfetto/lib, where the package looks for them in a source checkout).
LIBDIR ?= $(CURDIR)/ctf2perfetto/lib

.PHONY: native clean
native:
	mkdir -p $(LIBDIR)
	$(MAKE) -C preload OUT=$(LIBDIR)
	$(MAKE) -C ctf2perfetto/ctf/native OUT=$(LIBDIR)
	$(MAKE) -C ctf2perfetto/convert/native OUT=$(LIBDIR)

clean:
	rm -rf $(CURDIR)/ctf2perfetto/lib
	$(MAKE) -C preload clean OUT=$(LIBDIR)
	$(MAKE) -C ctf2perfetto/ctf/native clean
	$(MAKE) -C ctf2perfetto/convert/native clean
